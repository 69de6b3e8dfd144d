"""Lifetimes of the tensors the runtime manages, in execution steps of the top-level block.

A value is *managed* — its memory comes from the arena, planned ahead — when it is a tensor
produced by an out-variant node of the top-level block and it escapes nowhere: it may alias
no graph output (nor be held by one), no graph input, no constant and no object state.
(``static_runtime.passes.alias.AliasDb`` answers these from the operators' schemas.)

Its lifetime runs from the step of the node producing it to the last step at which it, or
anything that may alias or hold it, is used: a view keeps its base alive, a list built from
it keeps it alive until the list's last use, and a use inside an ``If``/``Loop`` block counts
at the step of that control-flow node, since the block may run at any point during it (or
many times). Steps number the top-level block's non-constant nodes from 0, matching the
runtime's per-node timings.

Values produced inside sub-blocks are not managed: a loop body may run many times per call,
with other shapes each time, and its values may be carried into the next iteration. A
``prim::fork`` block runs on another thread, with its own values and no arena. Nothing passed
into a fork (nor anything holding or held by it) is managed either: the alias analysis puts
fork inputs in the world, so such a tensor is allocated per call and lives as long as the
fork or anyone else holds it, whenever the fork's thread gets to it. Nor are
values whose size may depend on tensor data (``data_dependent_sizes``): the arena is planned
per input signature, and their size can change between calls with the same signature.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from static_runtime.ir import schema as S
from static_runtime.ir import types as T
from static_runtime.ir.graph import RETURN, Graph, Node, Value
from static_runtime.passes.alias import AliasDb


@dataclass(frozen=True)
class Lifetime:
    value: Value
    start: int
    end: int


@dataclass(frozen=True)
class Lifetimes:
    """The managed values of a graph and when each is live (inclusive step interval), and
    the outputs that come from the output arena (``manage_output_tensors``)."""

    steps: int
    managed: tuple[Lifetime, ...]
    outputs: tuple[Value, ...] = ()
    #: per managed value, every value the alias analysis says may alias it (itself
    #: included): another value sharing its storage at run time is a fact the analysis
    #: missed (``memory.arena.shared_unexpectedly``)
    aliases: dict = field(default_factory=dict, compare=False)

    def by_value(self) -> dict[Value, Lifetime]:
        return {lt.value: lt for lt in self.managed}


def top_level_steps(graph: Graph) -> dict[Node, int]:
    """Step number of every top-level non-constant node."""
    steps: dict[Node, int] = {}
    for node in graph.nodes:
        if node.kind != "prim::Constant":
            steps[node] = len(steps)
    return steps


def _step_of_use(node: Node, steps: dict[Node, int], last: int) -> int:
    """The top-level step at which a use by ``node`` happens (its top-level ancestor's)."""
    while node not in steps:
        block = node.owning_block
        if block is None or block.owning_node is None:
            # The graph's return node: live to the end of the call.
            return last if node.kind == RETURN else 0
        node = block.owning_node
    return steps[node]


def analyze(graph: Graph, is_out_variant: Callable[[Node], bool],
            alias_db: AliasDb | None = None, *, manage_outputs: bool = False) -> Lifetimes:
    """Managed values of the top-level block and their lifetimes; with ``manage_outputs``,
    also the outputs that may come from the output arena (``managed_outputs``)."""
    db = alias_db if alias_db is not None else AliasDb(graph)
    dynamic = data_dependent_sizes(graph)
    outputs = managed_outputs(graph, is_out_variant, db, dynamic) if manage_outputs else ()
    steps = top_level_steps(graph)
    last = max(steps.values(), default=0)

    candidates: list[Value] = []
    for node in graph.nodes:
        if node not in steps or len(node.outputs) != 1 or not is_out_variant(node):
            continue
        v = node.output
        if not isinstance(v.type, T.TensorType) or v in dynamic:
            continue
        if db.may_alias_graph_output(v) or db.may_alias_graph_input(v):
            continue
        candidates.append(v)
    if not candidates:
        return Lifetimes(len(steps), (), outputs)

    # Everything that may alias or hold a candidate extends its life: collect, per alias
    # class, the last step any value reaching that class is used (or defined) at.
    last_use_of_class: dict[object, int] = {}
    wanted = {db.class_id(v) for v in candidates}
    for node in graph.walk():
        for value in node.outputs:
            _note_value(value, db, wanted, steps, last, last_use_of_class)
        for block in node.blocks:
            for value in block.inputs:
                _note_value(value, db, wanted, steps, last, last_use_of_class)
    for value in graph.inputs:
        _note_value(value, db, wanted, steps, last, last_use_of_class)

    managed = []
    for v in candidates:
        start = steps[v.node]
        end = max(start, last_use_of_class.get(db.class_id(v), start))
        managed.append(Lifetime(v, start, end))
    aliases = {v: frozenset(db.alias_set(v)) | {v} for v in (*candidates, *outputs)}
    return Lifetimes(len(steps), tuple(managed), outputs, aliases)


def managed_outputs(graph: Graph, is_out_variant: Callable[[Node], bool], db: AliasDb,
                    dynamic: set[Value]) -> tuple[Value, ...]:
    """Outputs that can be written into the output arena: tensors produced by top-level
    out-variant nodes and returned as they are (or as elements of the returned tuple),
    aliased by nothing else (a view of one would point outside the arena the caller's
    references are counted on), not from outside, and not sized by data."""
    steps = top_level_steps(graph)
    returned: list[Value] = []
    for v in graph.outputs:
        if v.node.kind == "prim::TupleConstruct" and v.node in steps:
            returned.extend(v.node.inputs)
        else:
            returned.append(v)

    def fresh(v: Value) -> bool:
        node = v.node
        return (node in steps and len(node.outputs) == 1 and is_out_variant(node)
                and isinstance(v.type, T.TensorType) and v not in dynamic
                and not db.may_alias_graph_input(v))

    candidates = [v for v in dict.fromkeys(returned) if fresh(v)]
    # Returned together in one tuple, fresh tensors share an alias class (the tuple's
    # contents) without sharing memory; anything else in the class may be a view.
    allowed = set(candidates)
    return tuple(v for v in candidates if all(w in allowed for w in db.alias_set(v)))


def _note_value(value: Value, db: AliasDb, wanted: set, steps: dict[Node, int], last: int,
                last_use_of_class: dict[object, int]) -> None:
    reached = db.reachable_class_ids(value) & wanted
    if not reached:
        return
    points = [_step_of_use(value.node, steps, last)] if value.node in steps else []
    points.extend(_step_of_use(use.user, steps, last) for use in value.uses)
    if not points:
        return
    latest = max(points)
    for cls in reached:
        if last_use_of_class.get(cls, -1) < latest:
            last_use_of_class[cls] = latest


_INDEX = "aten::index.Tensor(Tensor self, Tensor?[] indices) -> Tensor"
#: Operators whose tensor result has its first tensor argument's dtype (views, copies).
_SAME_DTYPE = frozenset({
    "aten::unsqueeze", "aten::squeeze", "aten::view", "aten::reshape", "aten::expand",
    "aten::slice", "aten::select", "aten::transpose", "aten::permute", "aten::contiguous",
    "aten::clone", "aten::flatten", "aten::t", "aten::detach"})
#: Arithmetic whose result is a bool or byte mask only if every tensor argument is one.
_PROMOTING = frozenset({"aten::add", "aten::sub", "aten::mul", "static_runtime::add",
                        "static_runtime::sub"})
_INDEX_DTYPES = (torch.int64, torch.int32, torch.int16, torch.int8)


def integer_indexing(node: Node) -> bool:
    """Whether ``node`` is ``aten::index.Tensor`` with indices that cannot be masks: every
    index a tensor the graph computes with an integer dtype (``arange`` and what views and
    arithmetic make of it). Such indexing takes its result's shape from the indices' shapes,
    not from data (PyTorch's ``dynamic_output_shape`` tag is for the bool and byte masks)."""
    if node.schema is None or not S.matches(node.schema, _INDEX):
        return False
    build = node.inputs[1].node
    if build.kind != "prim::ListConstruct":
        return False
    return all(v.node.kind == "prim::Constant" and v.node.attrs.get("value") is None
               or _integer_tensor(v, 0) for v in build.inputs)


def _integer_tensor(v: Value, depth: int) -> bool:
    """Whether ``v`` is surely a tensor of an integer, non-byte dtype (a few steps back)."""
    if depth > 16:
        return False
    node = v.node
    kind = node.kind
    if kind == "prim::Constant":
        c = node.attrs.get("value")
        return isinstance(c, torch.Tensor) and c.dtype in _INDEX_DTYPES
    if kind == "aten::arange":
        # (the dtype argument is the fourth from the end in every overload; None: int64
        # for integer bounds, a float dtype otherwise, never a mask)
        dtype = node.inputs[-4] if len(node.inputs) >= 5 else None
        if dtype is None or dtype.node.kind != "prim::Constant":
            return False
        d = dtype.node.attrs.get("value")
        return d is None or d in _SCALAR_TYPE_CODES or d in _INDEX_DTYPES
    if kind in _SAME_DTYPE:
        return _integer_tensor(node.inputs[0], depth + 1)
    if kind in _PROMOTING:
        return any(isinstance(i.type, T.TensorType) and _integer_tensor(i, depth + 1)
                   for i in node.inputs)
    return False


#: TorchScript's ScalarType codes of ``_INDEX_DTYPES`` (int8 1, int16 2, int32 3, int64 4)
_SCALAR_TYPE_CODES = frozenset({1, 2, 3, 4})


def data_dependent_sizes(graph: Graph) -> set[Value]:
    """Values whose size (or, for scalars, whose value) may depend on tensor data.

    Seeded by PyTorch's operator tags (``dynamic_output_shape``: ``nonzero``,
    ``masked_select``, boolean indexing — not indexing with integer indices the graph
    computes, ``integer_indexing``; ``data_dependent_output``: ``item``) and carried
    forward through every node that consumes such a value; a control-flow node's outputs
    are tainted by anything inside its blocks. Conversions that have no tags
    (``aten::Int(Tensor)``) are not seen here; the runtime still copes with a managed value
    that outgrows its plan (``memory/arena.py``)."""
    tainted: set[Value] = set()

    def visit(block) -> bool:
        any_tainted = False
        for node in block.nodes:
            inner = False
            for b in node.blocks:  # every block, no short cut: each taints its own nodes
                inner = visit(b) or inner
            seeded = (node.schema is not None and bool(S.tags(node.schema)
                                                       & S.DATA_DEPENDENT_TAGS)
                      and not integer_indexing(node))
            if seeded or inner or any(v in tainted for v in node.inputs):
                tainted.update(node.outputs)
                any_tainted = True
        return any_tainted

    visit(graph.block)
    return tainted
