"""Alias analysis, the query API: ``AliasDb(graph)`` answers which values may alias, hold,
write or escape, from the classes ``build.AliasClasses`` made.

``AliasDb(graph)`` is a flow-insensitive snapshot of the graph it was built from: rebuild it
after changing the graph. Values it has never seen (created after it was built) are answered
for conservatively (they may alias anything, are written, are external, are not fresh).

Writes: ``writers(v)`` are the nodes writing anything ``v`` may alias *or hold* (a write to a
tensor in a list changes what the list holds); ``writers(v, same_object=True)`` only those
writing ``v``'s own class with a type that may be the same kind of object (a list changed as
a list, not its elements). Escapes: ``may_alias_graph_output(v)`` holds for a graph output,
its aliases, and anything a graph output holds (a tensor in a returned tuple escapes).
"""

from __future__ import annotations

from collections.abc import Iterable

from static_runtime.ir.graph import Graph, Node, Value
from static_runtime.passes.alias.build import WORLD, AliasClasses
from static_runtime.passes.alias.families import is_mutable, shallow_families


class AliasDb(AliasClasses):
    """May-alias classes, contents, writes and escape facts for one graph (see the module
    docstrings of ``alias.build`` and this module)."""

    def __init__(self, graph: Graph):
        super().__init__(graph)
        self._finish()

    def _finish(self) -> None:
        self._world_root = self._find(WORLD)
        self._output_roots: set[object] = set()
        for v in self.graph.outputs:
            if v in self._parent:
                self._output_roots |= self._reach(v)
        self._contained_roots = {self._find(c) for r, c in self._contents.items()
                                 if self._parent.get(r) is r and r is not c}
        self._writers: dict[object, list[Node]] = {}
        for node, written in self._writes.items():
            for root in {self._find(v) for v in written if v in self._parent}:
                self._writers.setdefault(root, []).append(node)
        self._members: dict[object, list[Value]] | None = None


    # ------------------------------------------------------------------ queries

    def knows(self, v: Value) -> bool:
        """Whether ``v`` existed when the analysis was built."""
        return v in self._known

    def class_id(self, v: Value) -> object | None:
        """An opaque key equal for values in the same alias class; None for immutable values.
        Unknown values get a key of their own (callers must treat them conservatively)."""
        if v not in self._known:
            return ("unknown", id(v))
        if v not in self._parent:
            return None
        return self._find(v)

    def reachable_class_ids(self, v: Value) -> set[object]:
        """``class_id`` of ``v`` and of everything ``v`` may hold (at any depth)."""
        if v not in self._known:
            return {("unknown", id(v)), self._world_root}
        if v not in self._parent:
            return set()
        return self._reach(v)

    def may_alias(self, a: Value, b: Value) -> bool:
        """Whether ``a`` and ``b`` may be the same object (or tensors sharing storage)."""
        if a is b:
            return is_mutable(a)
        if a not in self._known or b not in self._known:
            return is_mutable(a) and is_mutable(b)
        if a not in self._parent or b not in self._parent:
            return False
        return self._find(a) is self._find(b)

    def may_alias_any(self, v: Value, values: Iterable[Value]) -> bool:
        return any(self.may_alias(v, w) for w in values)

    def may_contain_alias(self, a: Value, b: Value) -> bool:
        """Whether ``a`` or anything it holds may alias ``b`` or anything ``b`` holds."""
        if not (is_mutable(a) and is_mutable(b)):
            return False
        if a not in self._known or b not in self._known:
            return True
        return bool(self._reach(a) & self._reach(b))

    def may_be_contained(self, v: Value) -> bool:
        """Whether ``v`` may be held by a container, tuple or object (or be external)."""
        if v not in self._known:
            return is_mutable(v)
        if v not in self._parent:
            return False
        root = self._find(v)
        return root in self._contained_roots or root is self._world_root

    def alias_set(self, v: Value) -> list[Value]:
        """All known values that may alias ``v`` (including ``v``), in no particular order."""
        if v not in self._parent:
            return [v] if is_mutable(v) else []
        if self._members is None:
            self._members = {}
            for x in self._parent:
                if isinstance(x, Value):
                    self._members.setdefault(self._find(x), []).append(x)
        return list(self._members[self._find(v)])

    def writes(self, node: Node) -> set[Value]:
        """The inputs ``node`` may write (``Tensor(a!)``, ``SetAttr``'s object, or every
        mutable input of a node the analysis does not understand). Empty for nodes with
        blocks: what their blocks write is written by the nodes inside."""
        if node not in self._analyzed:
            if node.blocks:
                return set()
            return {v for v in node.inputs if is_mutable(v)}
        return set(self._writes.get(node, ()))

    def writers(self, v: Value, *, same_object: bool = False) -> list[Node]:
        """Nodes that may write ``v``, anything that may alias it, or anything it holds.

        With ``same_object``, only writes to ``v``'s own class by a value whose type may be
        the same kind of object (a list changed as a list, not the tensors it holds)."""
        if v not in self._known:
            return [n for n in self.graph.walk() if self.writes(n)]
        if v not in self._parent:
            return []
        if not same_object:
            found: list[Node] = []
            for root in self._reach(v):
                found.extend(n for n in self._writers.get(root, []) if n not in found)
            return found
        mine = shallow_families(v.type)
        root = self._find(v)
        return [n for n in self._writers.get(root, [])
                if any(shallow_families(w.type) & mine and w in self._parent
                       and self._find(w) is root for w in self._writes[n])]

    def has_writers(self, v: Value, *, same_object: bool = False) -> bool:
        return bool(self.writers(v, same_object=same_object))

    def is_written_after(self, v: Value, node: Node, *, same_object: bool = False) -> bool:
        """Whether ``v`` (as in ``writers``) may be written after ``node`` runs: by a later
        node, or by any node in a loop that also contains ``node`` (next iteration)."""
        node_loops = set(_enclosing_loops(node))
        for w in self.writers(v, same_object=same_object):
            if w is node:
                if node_loops:
                    return True
                continue
            if node.is_before(w) or node_loops.intersection(_enclosing_loops(w)):
                return True
        return False

    def is_written_before(self, v: Value, node: Node, *, same_object: bool = False) -> bool:
        """Whether ``v`` (as in ``writers``) may be written before ``node`` runs."""
        node_loops = set(_enclosing_loops(node))
        for w in self.writers(v, same_object=same_object):
            if w is node:
                continue
            if w.is_before(node) or node_loops.intersection(_enclosing_loops(w)):
                return True
        return False

    def may_alias_graph_input(self, v: Value) -> bool:
        """Whether ``v`` may alias a graph input, a constant, object state, anything they
        hold, or anything else from outside the graph (such values must never be written)."""
        if v not in self._known:
            return is_mutable(v)
        if v not in self._parent:
            return False
        return self._find(v) is self._world_root

    def may_alias_graph_output(self, v: Value) -> bool:
        """Whether ``v`` may alias a graph output or something a graph output holds."""
        if v not in self._known:
            return is_mutable(v)
        if v not in self._parent:
            return False
        return self._find(v) in self._output_roots

    def escapes(self, v: Value) -> bool:
        """``may_alias_graph_input(v) or may_alias_graph_output(v)``."""
        return self.may_alias_graph_input(v) or self.may_alias_graph_output(v)

    def is_fresh(self, v: Value) -> bool:
        """Whether ``v`` is a new object made by its node (an unannotated schema output, a
        constructed container, a created object): it aliased nothing before that node ran.
        What it holds may of course exist already (a fresh list of existing tensors)."""
        return v in self._fresh


def _enclosing_loops(node: Node) -> list[Node]:
    loops = []
    block = node.owning_block
    while block is not None and block.owning_node is not None:
        owner = block.owning_node
        if owner.kind == "prim::Loop":
            loops.append(owner)
        block = owner.owning_block
    return loops

