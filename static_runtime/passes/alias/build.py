"""Alias analysis, construction: the alias classes of one graph, built node by node from
schemas and the rules of structural prims.

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
  an unannotated tensor output is *fresh* (newly allocated) — unless the operator is one
  known to hand an input back although its schema says otherwise (``rules.RETURNS_INPUT``:
  ``type_as``, ``dropout`` in eval, ``atleast_2d``, ...), whose output joins its inputs as a
  type variable's does; an unannotated container output
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
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from static_runtime.ir import schema as S
from static_runtime.ir import types as T
from static_runtime.ir.graph import Block, Graph, Node, Value
from static_runtime.passes.alias.families import (
    element_families,
    is_container_type,
    is_mutable,
    shallow_families,
)
from static_runtime.passes.alias.rules import PRIM_RULES, RETURNS_INPUT, Rule


@dataclass(frozen=True)
class _Location:
    """A union-find element that is not a value: the world, or one family's wildcard."""

    what: str  # "world" | "wildcard"
    family: str = ""


class _Contents:
    """The union-find element standing for what a class holds."""

    __slots__ = ()


#: The external world: graph inputs, constants, and whatever escapes the analysis.
WORLD = _Location("world")

_TYPE_VARS = {"t", "t1", "t2", "tVal", "tKey", "Any"}


def _declared_type_has_var(type_str: str) -> bool:
    return any(tok in _TYPE_VARS for tok in re.findall(r"[A-Za-z_][A-Za-z0-9_]*", type_str))


class AliasClasses:
    """The alias classes, contents, fresh values and writes of one graph, built by
    ``__init__`` (see the module docstring); ``AliasDb`` answers questions about them."""

    def __init__(self, graph: Graph):
        self.graph = graph
        self._parent: dict[object, object] = {WORLD: WORLD}
        #: class root → the element standing for its contents
        self._contents: dict[object, object] = {WORLD: WORLD}
        self._known: set[Value] = set()
        self._fresh: set[Value] = set()
        self._writes: dict[Node, tuple[Value, ...]] = {}
        self._analyzed: set[Node] = set()
        for v in graph.inputs:
            self._add(v)
            self._union(v, WORLD)
        self._analyze_block(graph.block)

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
                self._union(o, WORLD)
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
                self._union(v, WORLD)
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
            self._union(v, WORLD)

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
            elif _declared_type_has_var(r.type) or info.qualified in RETURNS_INPUT:
                # A bare type variable, or an operator known to hand an input back despite
                # its schema: the output may be an input, or held by one.
                for v in mutable_in:
                    self._union(o, v)
                    if is_container_type(v.type):
                        self._read(o, v)
            else:
                self._fresh.add(o)
        for o in node.outputs[len(info.returns):]:
            # More outputs than the schema declares: assume the worst about them.
            self._union(o, WORLD)
            for v in mutable_in:
                self._union(v, WORLD)

    def _annotated_output(self, o: Value, sets: frozenset[str], args, containers) -> None:
        for s in sets:
            if s != "*":
                for v, a in args:
                    if s in a.alias_sets or s in a.after_sets:
                        self._union(o, v)
                continue
            self._to_wildcard(o)
            if not containers:
                self._union(o, WORLD)
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
                self._union(v, WORLD)
        elif node.blocks:
            # Blocks of a node we do not model: whatever flows in or out is external.
            for b in node.blocks:
                for v in [*b.inputs, *b.outputs]:
                    self._union(v, WORLD)
            for o in node.outputs:
                self._union(o, WORLD)

