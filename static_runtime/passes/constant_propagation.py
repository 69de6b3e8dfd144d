"""``constant_propagation``: compute at preparation time what does not depend on the inputs.

Folded, until nothing changes:

* a node whose inputs are all constants, none of them ever written, run once with the
  operator registry's implementation (the one the run would use; ``run_passes`` is handed it
  as ``evaluate``, since ``ops/`` comes after this stage), when it is safe to run
  early and to share:
  - it has no side effects, is deterministic (``effects``) and has no blocks;
  - its schema says it writes nothing (a schema-less node only if it is a structural prim:
    tuple/list construction and unpacking, casts, ``isinstance``, variadic cat/stack); a
    result that aliases an input (a view, ``to``) aliases a constant, and is folded under
    the conditions below like any mutable result;
  - each result is a scalar, string, ``None``, device, dtype, a list/tuple of those, or a
    strided tensor of at most ``MAX_TENSOR_NUMEL`` elements (bigger tensors would bloat the
    model) — or a list/tuple built of the graph's own constants, whatever their size (an
    exported LSTM's weights: it holds no new tensor, and the LSTM then sees its weights as
    one constant, as a frozen TorchScript graph gives them), or a view of a constant,
    whatever its size (an exported linear's ``weight.T``: the product then sees a constant
    weight, as in a frozen TorchScript graph);
  - a mutable result (tensor, list) is never written (``AliasDb.has_writers``) and never
    reaches the caller (``may_alias_graph_output``): a constant is shared by every run, so a
    write, in the graph or by the caller, would leak into the next run.
  Running the node may raise (``1 // 0``); then it is left for the run to raise.
* ``prim::If`` with a constant condition: the taken branch replaces it.
* ``prim::Loop`` that runs zero times (constant trip count ≤ 0 or constant initial condition
  ``False``): its outputs are its initial values.
* ``aten::__is__``/``__isnot__`` against ``None`` when the other side's static type cannot
  be ``None`` (or can only be ``None``); ``prim::isinstance`` when the static type decides.
* an attention mask that masks nothing (a view of an all-``True`` or all-zero constant that
  the frontend saw does not widen the result) is replaced by ``None`` (``masks.py``).
* ``aten::dim``, ``aten::size``, ``prim::dtype`` of a tensor whose IR type fixes the rank,
  the dimension or the dtype. (Frozen TorchScript graphs usually say only ``Tensor``; the IR
  type is taken as a fact, so frontends must not put guesses there. No type fixes a device.)
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from static_runtime.ir import schema as S
from static_runtime.ir import types as T
from static_runtime.ir.graph import Graph, Node, Value
from static_runtime.passes.alias import PRIM_RULES, AliasDb, is_mutable
from static_runtime.passes.effects import has_side_effects, is_nondeterministic
from static_runtime.passes.masks import drop_noop_masks

#: Largest tensor (in elements) a fold may bake into the graph.
MAX_TENSOR_NUMEL = 1024

#: Prims without a (useful) schema that are safe to evaluate on constants.
FOLDABLE_PRIMS = frozenset({
    "prim::TupleConstruct", "prim::TupleUnpack", "prim::TupleIndex", "prim::TupleSlice",
    "prim::ListConstruct", "prim::ListUnpack", "prim::VarTupleUnpack", "prim::unchecked_cast",
    "prim::isinstance", "prim::VarConcat", "prim::VarStack",
})

_UNCERTAIN = (T.OptionalType, T.UnionType, T.OpaqueType, T.ClassType, T.FutureType)


#: How a node runs on constant inputs: the callable the run would use for it (taking the
#: inputs' values), or None if there is none. The operator tier, a later stage, provides it
#: (``ops.registry.evaluator``) when it runs the passes, so that a fold computes exactly what
#: the run would have.
NodeEvaluator = Callable[[Node], Callable[..., Any] | None]


def constant_propagation(graph: Graph, evaluate: NodeEvaluator) -> bool:
    """Fold constants, constant branches and empty loops; return whether anything changed.
    Nodes on constants are run with ``evaluate``'s callables."""
    changed = False
    while _one_round(graph, evaluate) or drop_noop_masks(graph):
        changed = True
    return changed


def _one_round(graph: Graph, evaluate: NodeEvaluator) -> bool:
    db = AliasDb(graph)
    changed = False
    for node in list(graph.walk()):
        if node.owning_block is None:
            continue  # removed by an earlier fold in this round
        if node.kind == "prim::If":
            changed |= _fold_if(node)
        elif node.kind == "prim::Loop":
            changed |= _fold_loop(node)
        elif node.kind != "prim::Constant":
            changed |= _fold_by_type(node, db) or _fold_node(node, db, evaluate)
    return changed


# ---------------------------------------------------------------- control flow


def constant_value(v: Value) -> tuple[bool, Any]:
    """``(True, value)`` if ``v`` is defined by a ``prim::Constant``, else ``(False, None)``."""
    if v.node.kind != "prim::Constant":
        return False, None
    return True, v.node.attrs.get("value")


#: What ``constant_or_unknown`` gives for a value no ``prim::Constant`` defines (distinct
#: from every constant, None included).
UNKNOWN = object()


def constant_or_unknown(v: Value) -> Any:
    """The constant ``v`` is, or ``UNKNOWN``: for matchers comparing many arguments with
    expected constants in one expression."""
    known, value = constant_value(v)
    return value if known else UNKNOWN


def _fold_if(node: Node) -> bool:
    known, cond = constant_value(node.inputs[0])
    if not known or not isinstance(cond, bool):
        return False
    branch = node.blocks[0 if cond else 1]
    for inner in list(branch.nodes):
        inner.move_before(node)
    for out, res in zip(node.outputs, branch.outputs, strict=True):
        out.replace_all_uses_with(res)
    node.destroy()
    return True


def _fold_loop(node: Node) -> bool:
    known_n, trips = constant_value(node.inputs[0])
    known_c, cond = constant_value(node.inputs[1])
    never = (known_n and isinstance(trips, int) and not isinstance(trips, bool) and trips <= 0) \
        or (known_c and cond is False)
    if not never:
        return False
    for out, init in zip(node.outputs, node.inputs[2:], strict=True):
        out.replace_all_uses_with(init)
    node.destroy()
    return True


# ---------------------------------------------------------------- facts from static types


def _fold_by_type(node: Node, db: AliasDb) -> bool:
    result = _static_result(node)
    if result is None:
        return False
    return _replace_with_constants(node, [result[0]], db)


def _static_result(node: Node) -> tuple[Any] | None:
    """``(value,)`` when the node's result follows from its inputs' static types."""
    name = node.schema_name() or node.kind
    if node.kind in ("aten::__is__", "aten::__isnot__") and len(node.inputs) == 2:
        same = _static_is(*node.inputs)
        if same is None:
            return None
        return (same if node.kind == "aten::__is__" else not same,)
    if node.kind == "prim::isinstance":
        decided = _static_isinstance(node.inputs[0].type, node.attrs.get("types", []))
        return None if decided is None else (decided,)
    if not node.inputs or not isinstance(node.inputs[0].type, T.TensorType):
        return None
    t: T.TensorType = node.inputs[0].type
    if name == "aten::dim" and t.shape is not None:
        return (len(t.shape),)
    if name == "aten::size" and t.shape is not None and all(d is not None for d in t.shape):
        return (list(t.shape),)
    if name == "aten::size.int" and t.shape is not None:
        known, dim = constant_value(node.inputs[1])
        if known and isinstance(dim, int) and -len(t.shape) <= dim < len(t.shape):
            size = t.shape[dim]
            return None if size is None else (size,)
    if name == "prim::dtype" and t.dtype is not None:
        # The runtime's own answer for a tensor of that dtype (ScalarType as TorchScript's int).
        return (torch.ops.prim.dtype(torch.empty(0, dtype=t.dtype)),)
    return None


def _is_none_constant(v: Value) -> bool:
    known, value = constant_value(v)
    return known and value is None and v.type is T.NoneT


def _static_is(a: Value, b: Value) -> bool | None:
    """Whether ``a is b``, when ``None`` on one side and the other's type decide it."""
    if _is_none_constant(b):
        a, b = b, a
    if not _is_none_constant(a):
        return None
    if b.type is T.NoneT:
        return True
    if isinstance(b.type, (T.OptionalType, T.UnionType, T.OpaqueType)) or b.type is T.Any:
        return None
    return False


def _static_isinstance(t: T.Type, candidates: list[T.Type]) -> bool | None:
    if isinstance(t, _UNCERTAIN) or t is T.Any or t is T.Number:
        return None
    answers = [_type_matches(t, c) for c in candidates]
    if any(a is True for a in answers):
        return True
    if answers and all(a is False for a in answers):
        return False
    return None


def _type_matches(t: T.Type, c: T.Type) -> bool | None:
    """Whether every value of static type ``t`` is an instance of ``c`` (None: unknown)."""
    if c is T.Any:
        return True
    if isinstance(c, _UNCERTAIN) or c is T.Number:
        return None
    if isinstance(c, T.TensorType) and isinstance(t, T.TensorType):
        return True if c.dtype is None and c.shape is None else None
    if type(c) is not type(t):
        return False
    if c == t:
        return True
    if isinstance(c, (T.ListType, T.DictType, T.TupleType, T.TensorType)):
        return None  # same constructor, other element types: not decided here
    return False  # two different simple types (int vs float)


# ---------------------------------------------------------------- evaluation


def _can_evaluate(node: Node) -> bool:
    if node.blocks or not node.outputs:
        return False
    if has_side_effects(node) or is_nondeterministic(node):
        return False
    if node.kind in PRIM_RULES:
        return node.kind in FOLDABLE_PRIMS
    if node.schema is None:
        return False
    return not S.parse(node.schema).writes_any_input()


def _fold_node(node: Node, db: AliasDb, evaluate: NodeEvaluator) -> bool:
    if not all(v.node.kind == "prim::Constant" for v in node.inputs):
        return False
    if not _can_evaluate(node):
        return False
    # A constant that something writes (a frozen list that is appended to) is not constant:
    # reading it depends on when, and on earlier runs.
    if any(is_mutable(v) and db.has_writers(v) for v in node.inputs):
        return False
    fn = evaluate(node)
    if fn is None:
        return False
    args = [constant_value(v)[1] for v in node.inputs]
    try:
        with torch.no_grad():
            result = fn(*args)
    except Exception:  # noqa: BLE001 - the op raises on these inputs: leave that to the run
        return False
    if len(node.outputs) == 1:
        values = [result]
    else:
        try:
            values = list(result)
        except TypeError:
            return False
        if len(values) != len(node.outputs):
            return False
    # A list or tuple of the graph's own constants (an LSTM's weights, as an exported program
    # lists them) bakes in no new tensor, whatever their size.
    held = frozenset(id(a) for a in args if isinstance(a, torch.Tensor)) \
        if node.kind in ("prim::ListConstruct", "prim::TupleConstruct") else frozenset()
    # A view of a constant (an exported linear's ``weight.T``: ``numpy_T``) bakes in no new
    # tensor either: it shares the constant's storage, whatever its size.
    shared = frozenset(_storage(a) for a in args if _storage(a))
    if shared:
        held = held | {id(v) for v in values if _storage(v) in shared}
    return _replace_with_constants(node, values, db, held)


def _storage(x: Any) -> int:
    """The address of ``x``'s storage if it is a strided CPU tensor with one, else 0."""
    if isinstance(x, torch.Tensor) and x.layout == torch.strided and x.device.type == "cpu":
        return x.untyped_storage().data_ptr()
    return 0


def _replace_with_constants(node: Node, values: list[Any], db: AliasDb,
                            held: frozenset[int] = frozenset()) -> bool:
    for out, value in zip(node.outputs, values, strict=True):
        if not foldable_value(value, held):
            return False
        if is_mutable(out) and (db.has_writers(out) or db.may_alias_graph_output(out)):
            return False
    renames = []
    for out, value in zip(node.outputs, values, strict=True):
        if isinstance(value, torch.Tensor):
            value = value.detach()
        const = node.graph.constant(value, out.type, before=node)
        const.node.source = node.source
        out.replace_all_uses_with(const)
        renames.append((const, out.name))
    node.destroy()
    for const, name in renames:
        const.set_name(name)
    return True


def foldable_value(value: Any, held: frozenset[int] = frozenset()) -> bool:
    """Whether a constant holding ``value`` may be baked into the graph (``held``: ids of
    tensors the graph's constants hold already, of any size)."""
    if value is None or isinstance(value, (bool, int, float, complex, str, torch.device,
                                           torch.dtype, torch.layout, torch.memory_format)):
        return True
    if isinstance(value, torch.Tensor):
        return (value.layout == torch.strided and not value.is_quantized
                and (value.numel() <= MAX_TENSOR_NUMEL or id(value) in held))
    if type(value) in (list, tuple):
        return all(foldable_value(v, held) for v in value)
    return False
