"""Views of arena tensors, made once per memory layout instead of once per call.

An arena tensor is the same tensor object on every call with its layout: an out variant
writes new values into it, its metadata stays. So a view of it (``view``, ``transpose``,
``select``, ``chunk``...), taken with arguments that are constants for the layout, is the same
view on every call: its data changes with the arena's, and its sizes, strides and offset do
not. Generated code takes such views once, when the factory binds a layout's arena tensors,
and the per-call code only reads them. A traced transformer's head reshapes (``view`` +
``transpose`` per projection) cost nothing per call then.

What may be hoisted (``Hoister.plan_for``), decided from schemas and alias facts:

* a node of the top-level block, no control flow, no side effects, no writes, deterministic;
* every result a tensor (or a list of tensors) its schema declares an alias of an argument
  (``Tensor(a) self -> Tensor(a)``), or the elements of a hoisted list (``ListUnpack``);
* exactly one argument is dynamic: an arena tensor of the layout or a hoisted result; every
  other one a constant, a value the signature fixes (``runtime.specialize``), or a list
  built from those;
* nothing in the graph may change the metadata of that tensor, of the result, or of
  anything aliasing them (``unsqueeze_``, ``resize_``, ``out=``): only in-place writes that
  keep metadata (``relu_``) are allowed, and they write the arena's data, which is the
  point;
* the result is not a graph output.

A schema's alias annotation says *may* alias: ``reshape``, ``contiguous`` and ``to`` return
a view or a copy depending on the input's strides. Those are fixed for a layout, so the
factory checks, once, that every hoisted result shares its arena tensor's storage; a node
whose result is a copy, or whose call raises, is excluded (``HoistRefused``) and the code
generated again without it, where it runs per call as before.

When an out variant cannot write into its arena tensor (PyTorch refused a resize; the
runtime allocates that value from then on), the generated code takes the views of the
allocated value for that call, and a later call of the same function hands back to the
general path (``SignatureChanged``), which binds new code.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

import torch

from static_runtime.ir import schema as S
from static_runtime.ir import types as T
from static_runtime.ir.graph import Node
from static_runtime.passes.alias import AliasDb
from static_runtime.passes.effects import has_side_effects, is_nondeterministic
from static_runtime.runtime.plan import Control, ExecutionPlan, ProcessedNode
from static_runtime.runtime.specialize import Specialization, keeps_metadata

_ELEMENT_ALIAS = re.compile(r"Tensor\((\w+)\)\[\]")
_UNPACK = frozenset({"prim::ListUnpack", "prim::TupleUnpack"})
_CONSTRUCT = frozenset({"prim::ListConstruct", "prim::TupleConstruct"})


class HoistRefused(Exception):
    """Raised by a generated factory: hoisting ``node`` did not give a view of the arena."""

    def __init__(self, node: Node):
        super().__init__(f"{getattr(node, 'kind', node)} does not give a view of its arena tensor")
        self.node = node


@dataclass(frozen=True)
class Hoisting:
    """What the code for one layout takes once per layout."""

    #: hoisted nodes in program order
    nodes: tuple[ProcessedNode, ...] = ()
    #: hoisted node → the slot of the arena tensor it is a view of
    root: dict[Node, int] = field(default_factory=dict)
    #: list constructions that only hoisted nodes read: built in the factory, not per call
    literal_lists: frozenset[Node] = frozenset()

    def __bool__(self) -> bool:
        return bool(self.nodes)


class Hoister:
    """Per plan: which nodes may be hoisted, given a layout's arena slots."""

    def __init__(self, plan: ExecutionPlan):
        self.plan = plan
        self._db: AliasDb | None = None
        self._value_of = {slot: v for v, slot in plan.slot_of.items()}
        self._producer = {s: pn for pn in plan.block.nodes for s in pn.outputs}
        self._readers: dict[int, list[ProcessedNode | None]] = {}
        for pn in plan.block.nodes:
            for s in _reads(pn):
                self._readers.setdefault(s, []).append(pn)
        for s in plan.block.outputs:
            self._readers.setdefault(s, []).append(None)  # read by the caller
        self._static: dict[Node, bool] = {}
        self._stable: dict[int, bool] = {}
        #: managed values whose out variant may hand back a result of its own
        self._handing_back = plan.handing_back()

    @property
    def db(self) -> AliasDb:
        if self._db is None:
            self._db = AliasDb(self.plan.graph)
        return self._db

    def plan_for(self, arena: frozenset[int], spec: Specialization | None,
                 excluded: frozenset[Node] = frozenset()) -> Hoisting:
        """The hoisting for code whose arena holds ``arena``; ``spec``: what that code's
        signature fixes; ``excluded``: nodes a factory found not to give views."""
        known = set(self.plan.constants) | (set(spec.known) if spec is not None else set())
        dropped = spec.dropped if spec is not None else set()
        outputs = set(self.plan.block.outputs)
        # (an arena value the signature fixes is a constant of the code: its node never runs;
        # one whose out variant may hand back a result of its own is not always the arena
        # tensor: ``registry.hands_back``)
        root: dict[int, int] = {s: s for s in arena
                                if s not in known and s not in self._handing_back
                                and self._metadata_stable(s)}
        nodes: list[ProcessedNode] = []
        by_node: dict[Node, int] = {}
        for pn in self.plan.block.nodes:
            if pn.node in dropped or pn.node in excluded or not self._may_hoist(pn):
                continue
            dynamic = [s for s in pn.inputs if s in root]
            if len(dynamic) != 1 or any(
                    s not in root and not self._fixed(s, known) for s in pn.inputs):
                continue
            if any(s in outputs or not self._metadata_stable(s) for s in pn.outputs):
                continue
            base = root[dynamic[0]]
            for s in pn.outputs:
                root[s] = base
            nodes.append(pn)
            by_node[pn.node] = base
        hoisted = {pn.node for pn in nodes}
        lists = frozenset(
            pn.node for pn in self.plan.block.nodes
            if pn.kind in _CONSTRUCT and pn.node not in dropped
            and all(self._fixed(s, known) for s in pn.inputs)
            and all(r is not None and r.node in hoisted for r in self._readers.get(
                pn.outputs[0], ())))
        return Hoisting(tuple(nodes), by_node, lists)

    def _fixed(self, slot: int, known: set[int]) -> bool:
        """Whether ``slot`` holds the same value on every call (a constant, a value the
        signature fixes, or a list or tuple built in the graph from those)."""
        if slot in known:
            return True
        pn = self._producer.get(slot)
        return (pn is not None and pn.kind in _CONSTRUCT
                and not self.db.writers(self._value_of[slot], same_object=True)
                and all(self._fixed(s, known) for s in pn.inputs))

    def _may_hoist(self, pn: ProcessedNode) -> bool:
        ok = self._static.get(pn.node)
        if ok is None:
            ok = self._static[pn.node] = self._static_check(pn)
        return ok

    def _static_check(self, pn: ProcessedNode) -> bool:
        node = pn.node
        if pn.control is not Control.NONE or pn.fn is None or pn.managed or not pn.outputs:
            return False
        if has_side_effects(node) or is_nondeterministic(node) or self.db.writes(node):
            return False
        if node.kind in _UNPACK:
            return all(isinstance(v.type, T.TensorType) for v in node.outputs)
        if node.schema is None:
            return False
        info = S.parse(node.schema)
        if info.is_vararg or len(info.returns) != len(node.outputs):
            return False
        tensor_sets = {a for arg in info.arguments if arg.type == "Tensor"
                       for a in arg.alias_sets}
        if len(info.returns) == 1 and info.returns[0].type == "List[Tensor]":
            # ``Tensor(a)[]`` (chunk, split, unbind): the parsed form keeps no alias set
            # for list elements, the text does.
            m = _ELEMENT_ALIAS.fullmatch(info.text.rsplit("->", 1)[1].strip())
            return m is not None and m.group(1) in tensor_sets
        return all(r.type == "Tensor" and r.alias_sets and not r.is_write
                   and r.alias_sets <= tensor_sets for r in info.returns)

    def _metadata_stable(self, slot: int) -> bool:
        """Whether no node may change the metadata of the tensor(s) in ``slot``, or the list
        holding them."""
        ok = self._stable.get(slot)
        if ok is None:
            v = self._value_of[slot]
            ok = all(keeps_metadata(n, self.db) for n in self.db.writers(v)) and not (
                isinstance(v.type, T.ListType) and self.db.writers(v, same_object=True))
            self._stable[slot] = ok
        return ok


def shares_storage(a: Any, b: Any) -> bool:
    """Whether tensor ``a`` lies in ``b``'s storage: a view of it, where ``b`` is an arena
    tensor or a view of one (a copy is never made inside the arena)."""
    return (isinstance(a, torch.Tensor)
            and a.untyped_storage().data_ptr() == b.untyped_storage().data_ptr())


def check_hoisted(nodes: tuple[Node, ...], results: tuple[tuple[tuple, Any], ...]) -> None:
    """Raise ``HoistRefused`` for the first node whose hoisted results (tensors, or lists of
    them) do not all share the storage of its arena tensor. An arena tensor has a storage of
    its own (``memory/arena.py``), and a copy is never made inside the arena, so sharing
    the storage is being a view of it."""
    for node, (values, base) in zip(nodes, results, strict=True):
        ptr = base.untyped_storage().data_ptr()
        for v in values:
            tensors = v if isinstance(v, (list, tuple)) else (v,)
            if not all(isinstance(t, torch.Tensor) and t.untyped_storage().data_ptr() == ptr
                       for t in tensors):
                raise HoistRefused(node)


def _reads(pn: ProcessedNode) -> set[int]:
    out = set(pn.inputs)
    for b in pn.blocks:
        for inner in b.nodes:
            out |= _reads(inner)
        out |= set(b.outputs)
    return out
