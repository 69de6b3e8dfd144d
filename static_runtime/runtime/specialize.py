"""Signature specialisation: what the generated code may assume from the input signature it
checks, and which nodes that decides.

Generated code for a memory layout starts with a guard that raises ``SignatureChanged`` unless
the call's inputs match the layout's key (``memory.cache.signature``): per input, a tensor's
dtype and shape; an int's, bool's or str's type and value; a list's or tuple's type, length
and, recursively, its elements' signatures; ``None`` as its type. Past the guard those are
facts. This module propagates them through the nodes they determine — tensor metadata
(``dim``, ``size``, ``numel``, ``prim::dtype``, ``len`` of a tensor), list length and
indexing, unpacking, scalar arithmetic and comparisons, ``is None`` tests — and through
``prim::If`` whose condition becomes a constant (only the taken branch runs). The generated
code then binds folded values as literals and leaves out the nodes nobody needs any more.

Soundness rules:

* facts only come from the guard's key and from the graph's constants; strides,
  contiguity or ``requires_grad`` are not in the key and are never assumed. A tensor's
  device is (the CPU unless the key names another), but checking it costs ~50 ns a tensor,
  so the guard checks it only in code that folds a ``prim::device``; the device of a tensor
  an operator computes is its ``Device`` argument's, or else its tensor arguments' common
  one (a meta run computes on the meta device, standing for it);
* the dtype and shape of a tensor an operator computes are facts when its arguments' are:
  the operator runs on meta tensors of those dtypes and shapes (an output's size never
  depends on its inputs' strides). Not for operators whose sizes depend on data (PyTorch's
  ``dynamic_output_shape``/``data_dependent_output`` tags; a meta run of anything that reads
  data raises and gives no fact). Only tensors (and lists of them) come from such a run,
  never scalars (``aten::equal`` of meta tensors answers without data); a node whose
  tensor got its fact this way always runs (its call may still raise on the real
  strides, ``view`` of a transposed tensor). Only PyTorch's operators (``aten``, ``prim``)
  and ours are run: a user's operator is user code, never run at preparation;
* the values of small tensors (``VALUE_FACT_BYTES``) computed from constants and known
  values only are facts too (``ValueFact``: ``prim::NumToTensor`` of a size, a slice of a
  constant buffer), so what is read from them folds (``aten::Int``, a size); such a tensor
  itself becomes a constant of the code (computed once per signature) when nothing writes
  it and the caller never gets it;
* a list fact holds only for a value no node may change as a list (the alias analysis'
  ``writers(..., same_object=True)``: ``append``, ``pop``, ``__setitem__`` ...); a tensor
  fact only for a value no node may write except through an in-place operator that keeps
  metadata (tagged ``inplace`` but not ``inplace_view`` by PyTorch, writing only ``self``:
  ``relu_`` keeps the shape, ``unsqueeze_``, ``resize_``, ``set_`` and ``out=`` do not);
* a node is folded by running the runtime's own implementation (``ProcessedNode.fn``) on
  the known values (on a meta tensor of the known dtype and shape for tensor metadata), so
  the constant is exactly what the call would have computed; if it raises, it is not folded;
* a metadata check (an ATen operator that returns and writes nothing, not an effects kind:
  ``_assert_tensor_metadata``, which ``torch.export`` leaves where a cast found its dtype) is
  left out when it passes on tensors of the dtypes, shapes and devices the facts give, and
  checks no stride (``_Run.proves``);
* other nodes with effects (``passes.effects.has_side_effects``: raise, warn, random
  draws...) or writes (``AliasDb.writes``) are always kept; ``prim::fork`` blocks are left as they are.

The facts themselves are ``runtime/facts.py``; this module propagates them forward, and
``runtime/liveness.py`` leaves out, going backward, the nodes nobody needs any more.
"""

from __future__ import annotations

from typing import Any

import torch

from static_runtime.ir import schema as S
from static_runtime.ir import types as T
from static_runtime.ir.graph import Node, Value
from static_runtime.ops.fallback import bind_overload
from static_runtime.ops.registry import MEANINGS, SHAPE_MEANINGS
from static_runtime.passes.alias import TENSOR, AliasDb, shallow_families
from static_runtime.passes.effects import (
    SIDE_EFFECT_KINDS,
    has_side_effects,
    is_nondeterministic,
)
from static_runtime.runtime.facts import (
    CONST_TYPES,
    UNKNOWN,
    Const,
    Fact,
    SeqFact,
    Specialization,
    TensorFact,
    ValueFact,
    fact_value,
    has_value,
    identity_fact,
    implies,
    key_fact,
    known_scalars,
    small,
    tensor_fact,
    trip_invariant,
    value_fact,
)
from static_runtime.runtime.hot import yield_to_requests
from static_runtime.runtime.liveness import Liveness
from static_runtime.runtime.plan import Control, ExecutionPlan, ProcessedBlock, ProcessedNode

#: Tensor metadata the key determines: evaluated on a meta tensor of the known dtype/shape.
_METADATA_KINDS = frozenset({"aten::dim", "aten::size", "aten::numel", "prim::dtype",
                             "aten::len", "aten::is_floating_point", "aten::is_complex"})
#: Operators run on meta tensors or known values at specialisation: PyTorch's and ours.
_OWN_NAMESPACES = frozenset({"aten", "prim", "static_runtime"})
_SCALAR_TYPES = frozenset({"int", "bool", "float", "str"})


class Specializer:
    """Specialises one execution plan's code per input signature; the alias facts it needs
    (which inputs may be written) are computed once."""

    def __init__(self, plan: ExecutionPlan):
        self.plan = plan
        self._db: AliasDb | None = None
        self._value_of = {slot: v for v, slot in plan.slot_of.items()}
        self._stable: dict[tuple[int, str], bool] = {}
        self._keeps: dict[Node, bool] = {}

    @property
    def db(self) -> AliasDb:
        if self._db is None:
            self._db = AliasDb(self.plan.graph)
        return self._db

    def stable(self, slot: int, fact: Fact) -> bool:
        """Whether ``fact`` about the value in ``slot`` holds for as long as the value lives:
        nothing may change the list it describes, or the tensor's dtype and shape."""
        if isinstance(fact, Const) or (isinstance(fact, SeqFact) and fact.type is tuple):
            return True  # immutable (what a tuple holds has facts of its own)
        if not isinstance(fact, SeqFact):
            return self.keeps_shape(slot)
        ok = self._stable.get((slot, "list"))
        if ok is None:
            ok = self._stable[(slot, "list")] = not self.db.writers(
                self._value_of[slot], same_object=True)
        return ok

    def keeps_shape(self, slot: int) -> bool:
        """Whether every write the graph may make to the tensor in ``slot`` (or to what may
        alias it) keeps its dtype and shape: ``relu_``, not ``resize_`` or ``unsqueeze_``."""
        ok = self._stable.get((slot, "tensor"))
        if ok is None:
            ok = self._stable[(slot, "tensor")] = all(
                self._keeps_metadata(n) for n in self.db.writers(self._value_of[slot]))
        return ok

    def value(self, slot: int) -> Value | None:
        """The IR value that ``slot`` holds (None for a slot no value names)."""
        return self._value_of.get(slot)

    def _keeps_metadata(self, node: Node) -> bool:
        """Whether every tensor ``node`` may write keeps its dtype and shape."""
        ok = self._keeps.get(node)
        if ok is None:
            ok = keeps_metadata(node, self.db)
            self._keeps[node] = ok
        return ok

    def shareable(self, slot: int) -> bool:
        """Whether one tensor may stand for the value in ``slot`` on every call: nothing
        writes it, and the caller never gets it (or anything holding it)."""
        v = self._value_of[slot]
        return not self.db.may_alias_graph_output(v) and not self.db.writers(v)

    def returns_written_self(self, node: Node) -> bool:
        """Whether ``node`` is an in-place operator keeping metadata that returns ``self``
        (``aten::relu_(Tensor(a!) self) -> Tensor(a!)``)."""
        if node.schema is None or not self._keeps_metadata(node):
            return False
        info = S.parse(node.schema)
        if len(info.returns) != 1 or not info.arguments:
            return False
        self_arg, ret = info.arguments[0], info.returns[0]
        return (self_arg.type == ret.type == "Tensor" and self_arg.is_write and ret.is_write
                and bool(self_arg.alias_sets) and self_arg.alias_sets == ret.alias_sets)

    def specialize(self, key: tuple) -> Specialization:
        """Fold what ``key`` (the signature the code's guard checks) determines."""
        run = _Run(self)
        plan = self.plan
        for slot, const in plan.constants.items():
            if type(const) in CONST_TYPES:
                run.facts[slot] = Const(const)
            elif isinstance(const, torch.Tensor) and const.layout is torch.strided:
                if not const.is_meta:
                    run.set(slot, tensor_fact(const, real=True, limit=False))
            else:
                run.set(slot, value_fact(const))  # lists and tuples
        for slot, k in zip(plan.block.inputs, key):
            fact = key_fact(k)
            if fact is not None and self.stable(slot, fact):
                run.facts[slot] = fact
        run.block(plan.block)
        spec = Specialization(taken=run.taken, assumes_device=run.uses_device,
                              proven=run.proven)
        spec.known = {s: f.value for s, f in run.facts.items()
                      if isinstance(f, Const) and s in run.folded}
        for s, f in run.facts.items():
            if isinstance(f, ValueFact) and s not in plan.constants and self.shareable(s):
                spec.known[s] = f.value
        Liveness(self, spec, run.computed).top(plan.block)
        return spec


class _Run:
    """Forward propagation of facts through one plan, in program order."""

    def __init__(self, owner: Specializer):
        self.owner = owner
        self.facts: dict[int, Fact] = {}
        self.taken: dict[Node, int] = {}
        #: slots made constant by this analysis (not the graph's own constants)
        self.folded: set[int] = set()
        #: nodes whose tensor outputs have facts from a meta run (they always run)
        self.computed: set[Node] = set()
        #: a ``prim::device`` was folded: the code assumes its input tensors' devices
        self.uses_device = False
        #: checks that pass on every call of the signature (``proves``)
        self.proven: set[Node] = set()

    def set(self, slot: int, fact: Fact | None) -> None:
        if fact is not None and self.owner.stable(slot, fact):
            self.facts[slot] = fact
            if isinstance(fact, Const):
                self.folded.add(slot)

    def block(self, block: ProcessedBlock) -> None:
        pause = yield_to_requests()
        for pn in block.nodes:
            self.node(pn)
            pause()

    def node(self, pn: ProcessedNode) -> None:
        if pn.control is Control.FORK:
            return  # the forked block sees only what is passed in: not analysed
        if pn.control is Control.LOOP:
            self.loop(pn)
            return
        if pn.control is Control.IF:
            cond = self.facts.get(pn.inputs[0])
            if isinstance(cond, Const) and type(cond.value) is bool:
                k = 0 if cond.value else 1
                self.taken[pn.node] = k
                self.block(pn.blocks[k])
                for out, inner in zip(pn.outputs, pn.blocks[k].outputs):
                    self.set(out, self.facts.get(inner))
            else:
                for b in pn.blocks:
                    self.block(b)
            return
        if self.proves(pn):
            self.proven.add(pn.node)
            return
        if has_side_effects(pn.node) or is_nondeterministic(pn.node):
            return
        if self.owner.db.writes(pn.node):
            # ``relu_(x)`` returns ``x``, dtype and shape unchanged (not its values)
            first = self.facts.get(pn.inputs[0]) if pn.inputs else None
            if (isinstance(first, TensorFact) and len(pn.outputs) == 1
                    and self.owner.returns_written_self(pn.node)):
                self.set(pn.outputs[0], TensorFact(first.dtype, first.shape, first.device))
            return
        facts = [self.facts.get(s) for s in pn.inputs]
        for out, fact in zip(pn.outputs, self.evaluate(pn, facts)):
            self.set(out, fact)

    def loop(self, pn: ProcessedNode) -> None:
        """Facts of a loop's carried tensors that every trip keeps: assume each carried
        tensor has, on entering the body, the dtype, shape and device it has on entering the
        loop; analyse the body; where the body's next value does not keep that fact, drop
        it and analyse again (what a failed attempt recorded is forgotten). By induction
        over the trips the facts that survive hold on every trip and after the loop (it
        returns the entry values or the last trip's). The counter, scalars and values stay
        unknown (they change from trip to trip)."""
        body = pn.blocks[0]
        carried = body.inputs[1:]
        assumed = [trip_invariant(self.facts.get(s)) for s in pn.inputs[2:]]
        while True:  # (each attempt that fails drops a fact: at most one per carried value)
            saved = (dict(self.facts), dict(self.taken), set(self.folded), set(self.computed),
                     set(self.proven), self.uses_device)
            for slot, fact in zip(carried, assumed):
                self.set(slot, fact)
            assumed = [self.facts.get(s) for s in carried]  # (what ``stable`` admitted)
            self.block(body)
            kept = [a if a is not None and implies(self.facts.get(o), a) else None
                    for a, o in zip(assumed, body.outputs[1:])]
            if kept == assumed:
                for out, fact in zip(pn.outputs, assumed):
                    self.set(out, fact)
                return
            (self.facts, self.taken, self.folded, self.computed, self.proven,
             self.uses_device) = saved
            assumed = kept

    def proves(self, pn: ProcessedNode) -> bool:
        """Whether ``pn`` is a metadata check that passes on every call of the signature: an
        ATen operator that returns and writes nothing (``_assert_tensor_metadata``, which
        ``torch.export`` leaves where a ``to`` found the dtype it asked for), not among the
        effects kinds (``_assert_async`` reads data), whose tensor arguments' dtypes, shapes
        and devices are facts and other arguments constants, no stride among them (strides
        are never facts), and which passes when run on tensors of those dtypes, shapes and
        devices (one element of storage each)."""
        node = pn.node
        if (pn.control is not Control.NONE or node.schema is None or pn.fn is None
                or node.kind in SIDE_EFFECT_KINDS):
            return False
        info = S.parse(node.schema)
        if info.returns or info.writes_any_input() or info.namespace != "aten":
            return False
        args = []
        for a, slot in zip(info.arguments, pn.inputs, strict=False):
            fact = self.facts.get(slot)
            if isinstance(fact, TensorFact) and fact.device is not None:
                args.append(torch.empty_strided(fact.shape, (0,) * len(fact.shape),
                                                dtype=fact.dtype, device=fact.device))
            elif isinstance(fact, Const) and ("stride" not in a.name or fact.value is None):
                args.append(fact.value)
            else:
                return False
        if len(args) != len(pn.inputs):
            return False
        try:
            pn.fn(*args)
        except Exception:  # noqa: BLE001  (it fails here: the call checks for itself)
            return False
        self.uses_device = True  # (the check may have read the devices)
        return True

    def evaluate(self, pn: ProcessedNode, facts: list[Fact | None]) -> list[Fact | None]:
        kind = pn.kind
        if kind in ("prim::ListUnpack", "prim::TupleUnpack"):
            seq = facts[0]
            if isinstance(seq, SeqFact) and len(seq.elems) == len(pn.outputs):
                return list(seq.elems)
            return []
        if kind == "prim::unchecked_cast":
            return facts[:1]
        if kind in ("prim::ListConstruct", "prim::TupleConstruct"):
            return [SeqFact(list if kind == "prim::ListConstruct" else tuple, tuple(facts))]
        if kind in ("aten::__getitem__", "prim::TupleIndex") and len(facts) == 2:
            seq, idx = facts
            if (isinstance(seq, SeqFact) and isinstance(idx, Const) and type(idx.value) is int
                    and -len(seq.elems) <= idx.value < len(seq.elems)):
                return [seq.elems[idx.value]]
            return []
        if kind == "aten::len" and len(facts) == 1 and isinstance(facts[0], SeqFact):
            return [Const(len(facts[0].elems))]
        if kind in ("aten::__is__", "aten::__isnot__"):
            return [identity_fact(kind, *facts)]
        if kind in _VARIADIC and pn.fn is not None:
            # our own variadic cat/stack (no schema): tensors in, one tensor out
            return _run_on(pn, facts, real=False,
                           fact=lambda x: tensor_fact(x, device=_common_device(facts)))
        if kind == "static_runtime::fused_region" and pn.fn is not None:
            # its subgraph's operators on meta tensors (``RegionKernel.meta``)
            return _run_on(pn, facts, real=False,
                           fact=lambda x: tensor_fact(x, device=_common_device(facts)))
        if len(pn.outputs) != 1 or pn.fn is None or pn.node.schema is None:
            return []
        if kind in _METADATA_KINDS and facts and isinstance(facts[0], TensorFact):
            return [self._metadata(pn, facts)]
        if kind == "prim::device" and facts and isinstance(facts[0], TensorFact):
            device = facts[0].device
            if device is None:
                return []
            self.uses_device = True
            return [Const(device)]
        if facts and all(map(known_scalars, facts)) and _scalar_only(pn.node.schema):
            return [_call(pn, [fact_value(f, True) for f in facts],
                          S.parse(pn.node.schema).returns[0].type)]
        return self._tensor_facts(pn, facts)

    def _tensor_facts(self, pn: ProcessedNode, facts: list[Fact | None]) -> list[Fact | None]:
        """Facts about what ``pn`` computes from tensors: the dtypes and shapes of the tensors
        it returns, from a run on meta tensors; and, when every argument's value is known
        and what it returns is small, its values, from a run on those."""
        if S.parse(pn.node.schema).namespace not in _OWN_NAMESPACES:
            return []  # a user's operator is user code: never run at preparation
        tensor_out = any(isinstance(v.type, T.TensorType) or _is_tensor_list(v.type)
                         for v in pn.node.outputs)
        known = all(has_value(f) for f in facts)
        if not tensor_out and not (known and any(isinstance(f, ValueFact) for f in facts)):
            return []
        out: list[Fact | None] = []
        if tensor_out and (not S.tags(pn.node.schema) & S.DATA_DEPENDENT_TAGS
                           or _integer_indices(pn, facts)):
            device = _result_device(pn, facts)
            out = _run_on(pn, facts, real=False,
                          fact=lambda x: tensor_fact(x, device=device))
        if known and all(f is None or small(f) for f in out):
            values = _run_on(pn, facts, real=True, fact=value_fact)
            if values:
                return values
        if any(f is not None for f in out):
            self.computed.add(pn.node)
        return out

    def _metadata(self, pn: ProcessedNode, facts: list[Fact | None]) -> Fact | None:
        t = facts[0]
        rest = facts[1:]
        if not all(isinstance(f, Const) for f in rest):
            return None
        try:
            meta = torch.empty(t.shape, dtype=t.dtype, device="meta")
            value = pn.fn(meta, *[f.value for f in rest])
        except Exception:  # noqa: BLE001  (the call would raise too: leave it to the call)
            return None
        if isinstance(value, list):
            # ``aten::size``: a new list each call; its length and items are facts as long as
            # nothing writes it.
            if all(type(v) is int for v in value):
                return SeqFact(list, tuple(Const(v) for v in value))
            return None
        return Const(value) if type(value) in CONST_TYPES else None




def _run_on(pn: ProcessedNode, facts: list[Fact | None], real: bool, fact) -> list[Fact | None]:
    """``fact`` of each of ``pn``'s results when run on what ``facts`` say (real values, or
    meta tensors); [] if it raises."""
    args = [fact_value(f, real) for f in facts]
    if any(a is UNKNOWN for a in args):
        return []
    fn = pn.fn if real else meta_callable(pn)
    try:
        # (no ``warnings.catch_warnings`` here: this runs on a background thread too, and
        # that context swaps the process-wide filters under every other thread)
        value = fn(*args)
    except Exception:  # noqa: BLE001  (needs data, or would raise: leave it to the call)
        return []
    values = [value] if len(pn.outputs) == 1 else list(value)
    return [fact(x) for x in values]


#: (schema, number of inputs) → the ``torch.ops`` call a meta run uses (an exported graph
#: may leave defaulted arguments out, so one schema may be called with fewer inputs)
_meta_callables: dict[tuple[str, int], Any] = {}


def meta_callable(pn: ProcessedNode) -> Any:
    """What runs ``pn`` on meta tensors: an ATen operator's ``torch.ops`` overload, which
    takes every argument as given (an implementation may have baked constants in, a
    ``Device`` among them, which a meta run must replace); one of our own operators'
    composite meaning (``registry.MEANINGS``); else the node's own. An operator with a
    cheaper function of the result's metadata alone (``registry.SHAPE_MEANINGS``) gets that."""
    schema = pn.node.schema
    if schema is None:
        return getattr(pn.fn, "meta", pn.fn)
    meaning = SHAPE_MEANINGS.get(S.parse(schema).qualified) or MEANINGS.get(schema)
    if meaning is not None:
        return meaning
    key = (schema, len(pn.node.inputs))
    fn = _meta_callables.get(key)
    if fn is None:
        info = S.parse(schema)
        op = S.resolve_overload(schema) if info.namespace == "aten" else None
        if op is None:
            return pn.fn
        fn = _meta_callables[key] = bind_overload(op, info, len(pn.node.inputs))
    return fn


_VARIADIC = frozenset({"prim::VarConcat", "prim::VarStack"})
_INDEX = "aten::index.Tensor(Tensor self, Tensor?[] indices) -> Tensor"
_INTEGER = frozenset({torch.int64, torch.int32, torch.int16, torch.int8})


def _integer_indices(pn: ProcessedNode, facts: list[Fact | None]) -> bool:
    """``aten::index.Tensor`` whose indices are known to be integer tensors (no bool or byte
    mask): its result's shape comes from theirs, not from data."""
    if pn.node.schema != _INDEX or len(facts) != 2 or not isinstance(facts[1], SeqFact):
        return False
    return all(isinstance(f, TensorFact) and f.dtype in _INTEGER
               or isinstance(f, Const) and f.value is None for f in facts[1].elems)


def _result_device(pn: ProcessedNode, facts: list[Fact | None]) -> torch.device | None:
    """Where the tensors ``pn`` returns are: its ``Device`` argument's, or else its tensor
    arguments' common device (ATen's rule); None if unknown."""
    info = S.parse(pn.node.schema)
    for arg, f in zip(info.arguments, facts):
        if arg.type in ("Device", "Device?"):
            if not isinstance(f, Const):
                return None
            if f.value is not None:
                return f.value if isinstance(f.value, torch.device) else None
    return _common_device(facts)


def _common_device(facts: list[Fact | None]) -> torch.device | None:
    found: set[torch.device | None] = set()
    for f in facts:
        if isinstance(f, TensorFact):
            found.add(f.device)
        elif isinstance(f, SeqFact):
            found.update(e.device for e in f.elems if isinstance(e, TensorFact))
    return found.pop() if len(found) == 1 else None



def _is_tensor_list(t: T.Type) -> bool:
    if isinstance(t, T.ListType):
        return isinstance(t.elem, T.TensorType)
    return isinstance(t, T.TupleType) and any(isinstance(e, T.TensorType) for e in t.elems)


def keeps_metadata(node: Node, db: AliasDb) -> bool:
    written = [w for w in db.writes(node) if TENSOR in shallow_families(w.type)]
    if not written:
        return True
    if node.schema is None:
        return False
    info = S.parse(node.schema)
    if not info.arguments or [a.is_write for a in info.arguments] != [True] + [False] * (
            len(info.arguments) - 1):
        return False
    try:
        packet = getattr(getattr(torch.ops, info.namespace), info.base_name)
        tags = getattr(packet, info.overload or "default").tags
    except (AttributeError, RuntimeError):
        return False
    return torch.Tag.inplace in tags and torch.Tag.inplace_view not in tags


def _scalar_only(schema: str) -> bool:
    """Scalars (or lists of them: ``__contains__.int_list``) in, one scalar out, nothing
    written."""
    info = S.parse(schema)
    return (not info.is_vararg and len(info.returns) == 1
            and info.returns[0].type in _SCALAR_TYPES and not info.writes_any_input()
            and all(a.type in _SCALAR_TYPES or a.type == "number"
                    or a.type.startswith("List[") and a.type[5:-1] in _SCALAR_TYPES
                    for a in info.arguments))


def _call(pn: ProcessedNode, args: list[Any], ret: str) -> Const | None:
    try:
        value = pn.fn(*args)
    except Exception:  # noqa: BLE001  (the call would raise too: leave it to the call)
        return None
    expected = {"int": int, "bool": bool, "float": float, "str": str}[ret]
    return Const(value) if type(value) is expected else None
