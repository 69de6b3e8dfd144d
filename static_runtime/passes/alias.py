"""Alias analysis: which values may be the same object (or share storage), what containers
may hold, and who writes what.

``AliasDb(graph)`` is a flow-insensitive snapshot of the graph it was built from: rebuild it
after changing the graph. Values it has never seen (created after it was built) are answered
for conservatively (they may alias anything, are written, are external, are not fresh).

The model (after TorchScript's ``AliasDb``; union-find with one *contents* class per class,
as in Steensgaard's points-to analysis):

* Only values of mutable types (``types.is_mutable_type``: tensors, lists, dicts, tuples with
  mutable contents, objects, ``Any``/``Optional``/``Union`` of those) take part. Two values
  *may alias* when they are in the same alias class (the same object, or tensors that may
  share storage). Classes only merge, so every answer errs on the side of "may alias".
* **Containment.** A class may have a *contents* class: everything its containers (lists,
  dicts, tuples, objects' attributes) hold, at any depth (contents of contents are the same
  class). Building ``[%a, %b]`` puts ``%a`` and ``%b`` in the new list's contents; unpacking,
  indexing and ``__getitem__`` read out of the contents. A container and what it holds are
  *not* one class: ``append`` to a list does not write its tensors, ``relu_`` on an element
  does not change the list. When two classes merge, so do their contents.
* **External world.** Graph inputs, constants, and the inputs and outputs of nodes the
  analysis does not understand join the *world* class, whose contents are itself (anything
  inside an input is external too). A value that may alias the world
  ``may_alias_graph_input``: it must never be written and is not the graph's to reuse. Graph
  inputs may alias each other (a caller may pass one tensor twice, or a tensor and a list
  holding it).
* **Schemas decide** for nodes that have one: an output annotated with alias set ``a`` joins
  the inputs annotated with ``a``; ``Tensor(a!)`` marks the input as written (``writes``);
  an unannotated tensor output is *fresh* (newly allocated); an unannotated container output
  is a fresh container whose contents may be any input's contents, or any input that fits
  its element type (``aten::list``, ``split``); an unannotated output whose declared type is
  a type variable (``t``) joins the inputs and their contents; an unannotated output of a
  node that writes an input of the same kind may be that input (``aten::add_.t`` returns its
  ``self`` without saying so). A node that writes a container (``t[](a!)``) may store in it
  any other input that fits, or their contents (``append``, ``extend``, ``_set_item``,
  ``update``).
* **Wildcards.** ``*`` (``t(*)`` outputs, ``t(c -> *)`` arguments that are stored away) also
  joins a per-type-family *wildcard* class (``Tensor``, ``List``, ``Dict``, ``Tuple``,
  ``Object``, ``Future``), so everything that went anonymously into or out of a container
  may alias everything else that did. A ``*`` output also reads the contents of the node's
  container inputs; with none, it comes from the world.
* **Control flow.** ``prim::If`` outputs join both branches' outputs. ``prim::Loop`` joins,
  for each carried value, the initial value, the body input, the body output and the loop
  output.
* **Forks.** ``prim::fork`` runs its block on another thread: its inputs escape there
  (they join the world, as do the block's inputs bound to them), the future it returns and
  what the block returns are external too, so ``aten::wait``'s result (read out of the
  future) may alias anything passed into a fork and is never fresh. The fork writes every
  mutable input (the block may run an in-place operator on it at any time until the wait).
* **Objects.** An object's attributes are its contents: ``prim::SetAttr`` writes the object
  and stores the value in its contents; ``prim::GetAttr`` reads from them. (The frozen module
  is a constant, so its attributes are external.)
* **Schema-less nodes** not modelled above write all their mutable inputs, and their inputs
  and outputs join the world (as does whatever flows through blocks of nodes other than
  ``prim::If``/``prim::Loop``).

Writes: ``writers(v)`` are the nodes writing anything ``v`` may alias *or hold* (a write to a
tensor in a list changes what the list holds); ``writers(v, same_object=True)`` only those
writing ``v``'s own class with a type that may be the same kind of object (a list changed as
a list, not its elements). Escapes: ``may_alias_graph_output(v)`` holds for a graph output,
its aliases, and anything a graph output holds (a tensor in a returned tuple escapes).
"""

from __future__ import annotations

import enum
import re
from collections.abc import Iterable
from dataclasses import dataclass

from static_runtime.ir import types as T
from static_runtime.ir.graph import Block, Graph, Node, Value
from static_runtime.ops import schema as S

#: Type families: what kind of object a value may be.
TENSOR, LIST, DICT, TUPLE, OBJECT, FUTURE = "Tensor", "List", "Dict", "Tuple", "Object", "Future"
ALL_FAMILIES = frozenset({TENSOR, LIST, DICT, TUPLE, OBJECT, FUTURE})


class Rule(enum.Enum):
    """How a structural prim node relates its outputs to its inputs."""

    CONSTANT = "constant"        # output is external (the world)
    CONSTRUCT = "construct"      # fresh container holding the inputs
    EXTRACT = "extract"          # outputs are held by the (container) inputs
    IDENTITY = "identity"        # output i is input i (casts, checks)
    SLICE = "slice"              # fresh container holding part of the input's contents
    FRESH = "fresh"              # fresh outputs, inputs only read
    READ = "read"                # outputs are not mutable; inputs only read
    GET_ATTR = "get_attr"        # reads the object's contents
    SET_ATTR = "set_attr"        # writes the object, stores the value in its contents
    CONTROL = "control"          # prim::If / prim::Loop, handled with their blocks
    FORK = "fork"                # prim::fork: everything it touches escapes to another thread


#: Structural prim kinds and their rule, decided by kind (their schemas, where PyTorch has one,
#: do not carry alias annotations: ``prim::TupleIndex(Any tup, int i) -> Any``).
PRIM_RULES: dict[str, Rule] = {
    "prim::Constant": Rule.CONSTANT,
    "prim::ListConstruct": Rule.CONSTRUCT,
    "prim::TupleConstruct": Rule.CONSTRUCT,
    "prim::DictConstruct": Rule.CONSTRUCT,
    "prim::ListUnpack": Rule.EXTRACT,
    "prim::TupleUnpack": Rule.EXTRACT,
    "prim::VarTupleUnpack": Rule.EXTRACT,
    "prim::TupleIndex": Rule.EXTRACT,
    "prim::TupleSlice": Rule.SLICE,
    "prim::unchecked_cast": Rule.IDENTITY,
    "prim::TypeCheck": Rule.IDENTITY,
    "prim::VarConcat": Rule.FRESH,
    "prim::VarStack": Rule.FRESH,
    "prim::CreateObject": Rule.FRESH,
    "prim::Uninitialized": Rule.FRESH,
    "prim::isinstance": Rule.READ,
    "prim::Print": Rule.READ,
    "prim::GetAttr": Rule.GET_ATTR,
    "prim::SetAttr": Rule.SET_ATTR,
    "prim::If": Rule.CONTROL,
    "prim::Loop": Rule.CONTROL,
    "prim::fork": Rule.FORK,
    # reads its inputs, returns tensors its compiled kernels wrote (passes/regions.py keeps
    # views out of its results)
    "static_runtime::fused_region": Rule.FRESH,
}


def deep_families(t: T.Type) -> frozenset[str]:
    """Families of the objects a value of type ``t`` may be or may (transitively) contain."""
    if isinstance(t, T.TensorType):
        return frozenset({TENSOR})
    if isinstance(t, T.ListType):
        return frozenset({LIST}) | deep_families(t.elem)
    if isinstance(t, T.DictType):
        return frozenset({DICT}) | deep_families(t.key) | deep_families(t.value)
    if isinstance(t, T.TupleType):
        inner = frozenset().union(*(deep_families(e) for e in t.elems))
        return inner | {TUPLE} if inner else inner
    if isinstance(t, T.OptionalType):
        return deep_families(t.elem)
    if isinstance(t, T.UnionType):
        return frozenset().union(*(deep_families(m) for m in t.members))
    if isinstance(t, T.FutureType):
        return frozenset({FUTURE}) | deep_families(t.elem)
    if isinstance(t, (T.ClassType, T.OpaqueType)) or t is T.Any:
        return ALL_FAMILIES
    return frozenset()


def shallow_families(t: T.Type) -> frozenset[str]:
    """Families of the object a value of type ``t`` may itself be."""
    if isinstance(t, T.TensorType):
        return frozenset({TENSOR})
    if isinstance(t, T.ListType):
        return frozenset({LIST})
    if isinstance(t, T.DictType):
        return frozenset({DICT})
    if isinstance(t, T.TupleType):
        return frozenset({TUPLE})
    if isinstance(t, T.OptionalType):
        return shallow_families(t.elem)
    if isinstance(t, T.UnionType):
        return frozenset().union(*(shallow_families(m) for m in t.members))
    if isinstance(t, T.FutureType):
        return frozenset({FUTURE})
    if isinstance(t, T.ClassType):
        return frozenset({OBJECT})
    if isinstance(t, T.OpaqueType) or t is T.Any:
        return ALL_FAMILIES
    return frozenset()


def element_families(t: T.Type) -> frozenset[str]:
    """Families of the objects a container of type ``t`` may hold (at any depth)."""
    if isinstance(t, T.ListType):
        return deep_families(t.elem)
    if isinstance(t, T.DictType):
        return deep_families(t.key) | deep_families(t.value)
    if isinstance(t, T.TupleType):
        return frozenset().union(*(deep_families(e) for e in t.elems))
    if isinstance(t, T.FutureType):
        return deep_families(t.elem)
    if isinstance(t, T.OptionalType):
        return element_families(t.elem)
    if isinstance(t, T.UnionType):
        return frozenset().union(*(element_families(m) for m in t.members))
    if isinstance(t, (T.ClassType, T.OpaqueType)) or t is T.Any:
        return ALL_FAMILIES
    return frozenset()


def is_container_type(t: T.Type) -> bool:
    """Whether values of ``t`` may hold other mutable values."""
    return bool(element_families(t))


def is_mutable(v: Value) -> bool:
    return T.is_mutable_type(v.type)


@dataclass(frozen=True)
class _Location:
    """A union-find element that is not a value: the world, or one family's wildcard."""

    what: str  # "world" | "wildcard"
    family: str = ""


class _Contents:
    """The union-find element standing for what a class holds."""

    __slots__ = ()


_WORLD = _Location("world")

_TYPE_VARS = {"t", "t1", "t2", "tVal", "tKey", "Any"}


def _declared_type_has_var(type_str: str) -> bool:
    return any(tok in _TYPE_VARS for tok in re.findall(r"[A-Za-z_][A-Za-z0-9_]*", type_str))


class AliasDb:
    """May-alias classes, contents, writes and escape facts for one graph (see the module
    docstring)."""

    def __init__(self, graph: Graph):
        self.graph = graph
        self._parent: dict[object, object] = {_WORLD: _WORLD}
        #: class root → the element standing for its contents
        self._contents: dict[object, object] = {_WORLD: _WORLD}
        self._known: set[Value] = set()
        self._fresh: set[Value] = set()
        self._writes: dict[Node, tuple[Value, ...]] = {}
        self._analyzed: set[Node] = set()
        for v in graph.inputs:
            self._add(v)
            self._union(v, _WORLD)
        self._analyze_block(graph.block)
        self._finish()

    # ------------------------------------------------------------------ union-find

    def _add(self, v: Value) -> None:
        self._known.add(v)
        if is_mutable(v):
            self._parent.setdefault(v, v)

    def _find(self, x: object) -> object:
        parent = self._parent
        root = x
        while parent[root] is not root:
            root = parent[root]
        while parent[x] is not root:
            parent[x], x = root, parent[x]
        return root

    def _union(self, a: object, b: object) -> None:
        """Merge the classes of ``a`` and ``b`` (and, in turn, their contents)."""
        pending = [(a, b)]
        while pending:
            a, b = pending.pop()
            if a not in self._parent or b not in self._parent:
                continue  # an immutable value: nothing to alias
            ra, rb = self._find(a), self._find(b)
            if ra is rb:
                continue
            self._parent[ra] = rb
            ca = self._contents.pop(ra, None)
            if ca is not None:
                cb = self._contents.get(rb)
                if cb is None:
                    self._contents[rb] = ca
                else:
                    pending.append((ca, cb))

    def _contents_of(self, x: object) -> object:
        """The element standing for what ``x``'s class holds (created on first use; what the
        contents hold is the contents themselves)."""
        root = self._find(x)
        c = self._contents.get(root)
        if c is None:
            c = _Contents()
            self._parent[c] = c
            self._contents[c] = c
            self._contents[root] = c
        return c

    def _store(self, v: Value, container: Value) -> None:
        """``v`` (and what it holds) may now be held by ``container``."""
        if is_mutable(v) and container in self._parent:
            self._union(v, self._contents_of(container))

    def _read(self, v: Value, container: Value) -> None:
        """``v`` was taken out of ``container``."""
        if is_mutable(v) and container in self._parent:
            self._union(v, self._contents_of(container))

    def _share_contents(self, a: Value, b: Value) -> None:
        if a in self._parent and b in self._parent:
            self._union(self._contents_of(a), self._contents_of(b))

    def _to_wildcard(self, v: Value) -> None:
        for fam in shallow_families(v.type):
            loc = _Location("wildcard", fam)
            self._parent.setdefault(loc, loc)
            self._union(v, loc)

    # ------------------------------------------------------------------ building

    def _analyze_block(self, block: Block) -> None:
        for node in block.nodes:
            for o in node.outputs:
                self._add(o)
            for b in node.blocks:
                for v in b.inputs:
                    self._add(v)
            self._analyze_node(node)
            self._analyzed.add(node)
            for b in node.blocks:
                self._analyze_block(b)
            self._analyze_control_flow(node)

    def _analyze_node(self, node: Node) -> None:
        rule = PRIM_RULES.get(node.kind)
        mutable_in = [v for v in node.inputs if is_mutable(v)]
        outs = node.outputs
        if rule is Rule.CONTROL or rule is Rule.READ:
            return
        if rule is Rule.CONSTANT:
            for o in outs:
                self._union(o, _WORLD)
        elif rule is Rule.CONSTRUCT:
            for o in outs:
                self._fresh.add(o)
                for v in mutable_in:
                    self._store(v, o)
        elif rule is Rule.EXTRACT:
            for o in outs:
                for v in mutable_in:
                    self._read(o, v)
        elif rule is Rule.IDENTITY:
            for o, v in zip(outs, node.inputs):
                self._union(o, v)
        elif rule is Rule.SLICE:
            for o in outs:
                self._fresh.add(o)
                for v in mutable_in:
                    self._share_contents(o, v)
        elif rule is Rule.FRESH:
            self._fresh.update(outs)
        elif rule is Rule.GET_ATTR:
            for o in outs:
                self._read(o, node.inputs[0])
        elif rule is Rule.FORK:
            self._writes[node] = tuple(mutable_in)
            for v in [*mutable_in, *outs]:
                self._union(v, _WORLD)
        elif rule is Rule.SET_ATTR:
            obj = node.inputs[0]
            self._writes[node] = (obj,)
            for v in node.inputs[1:]:
                self._store(v, obj)
        elif node.schema is not None:
            self._analyze_schema(node, S.parse(node.schema), mutable_in)
        else:
            self._analyze_unknown(node, mutable_in)

    def _analyze_unknown(self, node: Node, mutable_in: list[Value]) -> None:
        if mutable_in:
            self._writes[node] = tuple(mutable_in)
        for v in [*mutable_in, *node.outputs]:
            self._union(v, _WORLD)

    def _analyze_schema(self, node: Node, info: S.SchemaInfo, mutable_in: list[Value]) -> None:
        args = list(zip(node.inputs, info.arguments))  # vararg extras: unannotated reads
        written = [v for v, a in args if a.is_write and is_mutable(v)]
        if written:
            self._writes[node] = tuple(written)
        # A written container may receive any other input that fits it, or their contents.
        for w in written:
            if not is_container_type(w.type):
                continue
            for v in mutable_in:
                if v is w:
                    continue
                if shallow_families(v.type) & element_families(w.type):
                    self._store(v, w)
                if element_families(v.type) & element_families(w.type):
                    self._share_contents(v, w)
        containers = [v for v in mutable_in if is_container_type(v.type)]
        # ``Tensor(a -> *)`` / ``t(c -> *)``: stored away where anonymous readers find it.
        for v, a in args:
            if is_mutable(v) and ("*" in a.after_sets or "*" in a.alias_sets):
                self._to_wildcard(v)
        for o, r in zip(node.outputs, info.returns):
            if not is_mutable(o):
                continue
            sets = r.alias_sets | r.after_sets
            if sets:
                self._annotated_output(o, sets, args, containers)
                continue
            # An unannotated output of a node that writes an input of its kind may be that
            # input (``aten::add_.t(t[](a!) self, t[] b) -> t[]`` returns ``self``).
            same_kind = [w for w in written if shallow_families(w.type) & shallow_families(o.type)]
            if same_kind:
                for w in same_kind:
                    self._union(o, w)
                continue
            if is_container_type(o.type) and not _declared_type_has_var(r.type) \
                    or isinstance(o.type, (T.ListType, T.DictType, T.TupleType)):
                self._fresh_container(o, mutable_in)
            elif _declared_type_has_var(r.type):
                # A bare type variable: the output may be an input, or held by one.
                for v in mutable_in:
                    self._union(o, v)
                    if is_container_type(v.type):
                        self._read(o, v)
            else:
                self._fresh.add(o)
        for o in node.outputs[len(info.returns):]:
            # More outputs than the schema declares: assume the worst about them.
            self._union(o, _WORLD)
            for v in mutable_in:
                self._union(v, _WORLD)

    def _annotated_output(self, o: Value, sets: frozenset[str], args, containers) -> None:
        for s in sets:
            if s != "*":
                for v, a in args:
                    if s in a.alias_sets or s in a.after_sets:
                        self._union(o, v)
                continue
            self._to_wildcard(o)
            if not containers:
                self._union(o, _WORLD)
            for c in containers:
                self._read(o, c)

    def _fresh_container(self, o: Value, mutable_in: list[Value]) -> None:
        """An unannotated container output: new, holding inputs' contents or inputs."""
        self._fresh.add(o)
        holds = element_families(o.type)
        for v in mutable_in:
            if element_families(v.type) & holds:
                self._share_contents(o, v)
            if shallow_families(v.type) & holds:
                self._store(v, o)

    def _analyze_control_flow(self, node: Node) -> None:
        if node.kind == "prim::If":
            for i, o in enumerate(node.outputs):
                for b in node.blocks:
                    if i < len(b.outputs):
                        self._union(o, b.outputs[i])
        elif node.kind == "prim::Loop" and node.blocks:
            body = node.blocks[0]
            for i, o in enumerate(node.outputs):
                group = [o]
                if 2 + i < len(node.inputs):
                    group.append(node.inputs[2 + i])
                if 1 + i < len(body.inputs):
                    group.append(body.inputs[1 + i])
                if 1 + i < len(body.outputs):
                    group.append(body.outputs[1 + i])
                for v in group[1:]:
                    self._union(o, v)
        elif node.kind == "prim::fork" and node.blocks:
            body = node.blocks[0]
            for v in [*body.inputs, *body.outputs]:
                self._union(v, _WORLD)
        elif node.blocks:
            # Blocks of a node we do not model: whatever flows in or out is external.
            for b in node.blocks:
                for v in [*b.inputs, *b.outputs]:
                    self._union(v, _WORLD)
            for o in node.outputs:
                self._union(o, _WORLD)

    def _finish(self) -> None:
        self._world_root = self._find(_WORLD)
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

    def _reach(self, x: object) -> set[object]:
        """Roots of ``x``'s class and of everything it (transitively) holds."""
        roots: set[object] = set()
        root = self._find(x)
        while root not in roots:
            roots.add(root)
            c = self._contents.get(root)
            if c is None:
                break
            root = self._find(c)
        return roots

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
