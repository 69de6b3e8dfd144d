"""SSA graph: ``Graph``, ``Block``, ``Node``, ``Value``.

Modelled on TorchScript's IR (``seeds/jit_overview.md``, "Graph"): a graph owns
one top-level block; a block is a list of nodes between a parameter node
(whose outputs are the block's inputs) and a return node (whose inputs are the
block's outputs); nodes of kind ``prim::If``/``prim::Loop`` own sub-blocks, and a
``prim::fork`` owns one: the forked function, its inputs bound to the node's inputs
(TorchScript keeps it as the fork's ``Subgraph`` attribute).

The IR keeps its own use-lists: every mutation goes through a method here
(``Node.replace_input``, ``Value.replace_all_uses_with``, ``Node.destroy``...),
so passes never patch use-lists by hand.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from static_runtime.ir import types as T

PARAM = "prim::Param"
RETURN = "prim::Return"


#: The attribute under which a node keeps a function of its own (a ``Graph``, not a block:
#: its values are not the enclosing graph's, and passes walking the graph do not enter it).
#: ``static_runtime::fused_region`` keeps the operators it runs as one compiled kernel there;
#: the printer prints it under the node as ``subgraph(...): ... return (...)``.
SUBGRAPH = "subgraph"


#: ``Node.meta`` key a frontend sets on a ``scaled_dot_product_attention`` node whose traced
#: shapes show that its ``attn_mask`` does not widen the result (each mask dimension is 1 or
#: the scores' size there); ``passes/masks.py`` may then drop a mask that masks nothing.
MASK_WIDENS_NOTHING_META = "mask_widens_nothing"


@dataclass(frozen=True)
class Use:
    """``user.inputs[index]`` is the used value."""

    user: Node
    index: int


class Value:
    """One SSA value: defined by exactly one node (``node``, output ``offset``)."""

    __slots__ = ("_name", "graph", "node", "offset", "type", "uses")

    def __init__(self, graph: Graph, node: Node, offset: int, type: T.Type, name: str | None):
        self.graph = graph
        self.node = node
        self.offset = offset
        self.type = type
        self.uses: list[Use] = []
        self._name = graph._unique_name(name)

    @property
    def name(self) -> str:
        return self._name

    def set_name(self, name: str) -> None:
        self.graph._release_name(self._name)
        self._name = self.graph._unique_name(name)

    def sole_user(self) -> Node | None:
        """The node using this value, if exactly one use is made of it (else None)."""
        return self.uses[0].user if len(self.uses) == 1 else None

    def replace_all_uses_with(self, other: Value) -> None:
        for use in list(self.uses):
            use.user.replace_input(use.index, other)

    def replace_uses_after(self, node: Node, other: Value) -> None:
        """Replace uses by nodes that come after ``node`` (in program order, nested blocks too)."""
        for use in list(self.uses):
            if use.user is not node and node.is_before(use.user):
                use.user.replace_input(use.index, other)

    def __repr__(self) -> str:
        return f"%{self._name}"


class Node:
    """One operation. ``kind`` is ``namespace::name``; ``attrs`` hold compile-time values."""

    __slots__ = (
        "_inputs",
        "attrs",
        "blocks",
        "graph",
        "kind",
        "meta",
        "outputs",
        "owning_block",
        "schema",
        "source",
    )

    def __init__(self, graph: Graph, kind: str):
        self.graph = graph
        self.kind = kind
        self._inputs: list[Value] = []
        self.outputs: list[Value] = []
        self.attrs: dict[str, Any] = {}
        self.blocks: list[Block] = []
        self.owning_block: Block | None = None
        #: The operator schema string (``aten::add.Tensor(Tensor self, ...) -> Tensor``), if any.
        self.schema: str | None = None
        #: Where the node came from in user source: ``file:line`` (or None).
        self.source: str | None = None
        #: Side table for analysis results that are not IR (keys: ``*_META`` below).
        self.meta: dict[str, Any] = {}

    # -- inputs
    @property
    def inputs(self) -> tuple[Value, ...]:
        return tuple(self._inputs)

    def add_input(self, value: Value) -> None:
        value.uses.append(Use(self, len(self._inputs)))
        self._inputs.append(value)

    def replace_input(self, index: int, value: Value) -> None:
        old = self._inputs[index]
        old.uses.remove(Use(self, index))
        self._inputs[index] = value
        value.uses.append(Use(self, index))

    def remove_input(self, index: int) -> None:
        self._drop_uses()
        del self._inputs[index]
        self._add_uses()

    def remove_all_inputs(self) -> None:
        self._drop_uses()
        self._inputs.clear()

    def set_inputs(self, values: list[Value]) -> None:
        self._drop_uses()
        self._inputs = list(values)
        self._add_uses()

    def _drop_uses(self) -> None:
        for i, v in enumerate(self._inputs):
            v.uses.remove(Use(self, i))

    def _add_uses(self) -> None:
        for i, v in enumerate(self._inputs):
            v.uses.append(Use(self, i))

    # -- outputs
    def add_output(self, type: T.Type, name: str | None = None) -> Value:
        v = Value(self.graph, self, len(self.outputs), type, name)
        self.outputs.append(v)
        return v

    def remove_output(self, index: int) -> None:
        v = self.outputs[index]
        if v.uses:
            raise ValueError(f"cannot remove output {v} of {self.kind}: it still has uses")
        self.graph._release_name(v.name)
        del self.outputs[index]
        for i, o in enumerate(self.outputs):
            o.offset = i

    @property
    def output(self) -> Value:
        if len(self.outputs) != 1:
            raise ValueError(f"{self.kind} has {len(self.outputs)} outputs, not one")
        return self.outputs[0]

    # -- blocks
    def add_block(self) -> Block:
        b = Block(self.graph, self)
        self.blocks.append(b)
        return b

    # -- placement
    def insert_before(self, other: Node) -> Node:
        block = other.owning_block
        assert block is not None
        self._detach_if_placed()
        block.nodes.insert(block.nodes.index(other), self)
        self.owning_block = block
        return self

    def insert_after(self, other: Node) -> Node:
        block = other.owning_block
        assert block is not None
        self._detach_if_placed()
        if other.kind == PARAM:
            block.nodes.insert(0, self)
        else:
            block.nodes.insert(block.nodes.index(other) + 1, self)
        self.owning_block = block
        return self

    def move_before(self, other: Node) -> None:
        self.insert_before(other)

    def _detach_if_placed(self) -> None:
        if self.owning_block is not None:
            self.owning_block.nodes.remove(self)
            self.owning_block = None

    def destroy(self) -> None:
        """Remove the node; its outputs must have no uses left."""
        for o in self.outputs:
            if o.uses:
                users = ", ".join(u.user.kind for u in o.uses)
                raise ValueError(f"cannot destroy {self.kind}: output {o} is used by {users}")
        for b in self.blocks:
            for n in reversed(list(b.nodes)):
                n._force_destroy()
            b.return_node.remove_all_inputs()
        self.remove_all_inputs()
        for o in self.outputs:
            self.graph._release_name(o.name)
        self._detach_if_placed()

    def _force_destroy(self) -> None:
        for b in self.blocks:
            for n in reversed(list(b.nodes)):
                n._force_destroy()
            b.return_node.remove_all_inputs()
        self.remove_all_inputs()
        self._detach_if_placed()

    # -- queries
    def is_before(self, other: Node) -> bool:
        """Whether ``self`` executes before ``other`` in program order (``other`` may be nested)."""
        a, b = self._position(), other._position()
        return a < b

    def _position(self) -> tuple[int, ...]:
        path: list[int] = []
        node: Node | None = self
        while node is not None and node.owning_block is not None:
            block = node.owning_block
            if node.kind == RETURN:
                idx = len(block.nodes)
            elif node.kind == PARAM:
                idx = -1
            else:
                idx = block.nodes.index(node)
            path.append(idx)
            owner = block.owning_node
            if owner is None:
                break
            path.append(owner.blocks.index(block))
            node = owner
        return tuple(reversed(path))

    def schema_name(self) -> str | None:
        """``aten::add.Tensor`` from the schema, or None."""
        if not self.schema:
            return None
        return self.schema.split("(", 1)[0]

    def __repr__(self) -> str:
        outs = ", ".join(map(repr, self.outputs))
        ins = ", ".join(map(repr, self._inputs))
        return f"<Node {outs} = {self.kind}({ins})>"


class Block:
    """A list of nodes with block inputs (outputs of a ``prim::Param`` node) and outputs
    (inputs of a ``prim::Return`` node)."""

    def __init__(self, graph: Graph, owning_node: Node | None):
        self.graph = graph
        self.owning_node = owning_node
        self.param_node = Node(graph, PARAM)
        self.param_node.owning_block = self
        self.return_node = Node(graph, RETURN)
        self.return_node.owning_block = self
        self.nodes: list[Node] = []

    @property
    def inputs(self) -> list[Value]:
        return self.param_node.outputs

    @property
    def outputs(self) -> tuple[Value, ...]:
        return self.return_node.inputs

    def add_input(self, type: T.Type, name: str | None = None) -> Value:
        return self.param_node.add_output(type, name)

    def remove_input(self, index: int) -> None:
        self.param_node.remove_output(index)

    def add_output(self, value: Value) -> None:
        self.return_node.add_input(value)

    def remove_output(self, index: int) -> None:
        self.return_node.remove_input(index)

    def append(self, node: Node) -> Node:
        node._detach_if_placed()
        self.nodes.append(node)
        node.owning_block = self
        return node

    def prepend(self, node: Node) -> Node:
        node._detach_if_placed()
        self.nodes.insert(0, node)
        node.owning_block = self
        return node

    def walk(self) -> Iterator[Node]:
        """All nodes of this block and of its nested blocks, in program order."""
        for n in list(self.nodes):
            yield n
            for b in n.blocks:
                yield from b.walk()


class Graph:
    """A function: top-level block plus a namespace of value names."""

    def __init__(self) -> None:
        self._names: set[str] = set()
        self._counter = itertools.count()
        self.block = Block(self, None)
        #: Argument names and defaults of the function this graph implements, if known
        #: (filled by frontends; the runtime binds keyword arguments with it).
        self.signature: Signature | None = None

    # -- names
    def _unique_name(self, hint: str | None) -> str:
        if hint is None or not _LEGAL_NAME.match(hint) or hint.isdigit():
            while True:
                name = str(next(self._counter))
                if name not in self._names:
                    break
        else:
            name = hint
            if name in self._names:
                base = _SUFFIX.sub("", hint)
                for i in itertools.count(1):
                    name = f"{base}.{i}"
                    if name not in self._names:
                        break
        self._names.add(name)
        return name

    def _release_name(self, name: str) -> None:
        self._names.discard(name)

    # -- convenience
    @property
    def inputs(self) -> list[Value]:
        return self.block.inputs

    @property
    def outputs(self) -> tuple[Value, ...]:
        return self.block.outputs

    @property
    def nodes(self) -> list[Node]:
        return self.block.nodes

    def add_input(self, type: T.Type, name: str | None = None) -> Value:
        return self.block.add_input(type, name)

    def add_output(self, value: Value) -> None:
        self.block.add_output(value)

    def create(self, kind: str, inputs: list[Value] | tuple[Value, ...] = (),
               n_outputs: int = 0, output_types: list[T.Type] | None = None) -> Node:
        """A new node, not yet placed in a block."""
        node = Node(self, kind)
        for v in inputs:
            node.add_input(v)
        types = output_types if output_types is not None else [T.Tensor] * n_outputs
        for t in types:
            node.add_output(t)
        return node

    def replace_node(self, old: Node, kind: str, inputs: list[Value] | tuple[Value, ...], *,
                     schema: str | None = None,
                     remove: list[Node] | tuple[Node, ...] | None = None) -> Node:
        """A node ``kind(inputs)`` in the place of single-output ``old``: placed before it,
        with ``schema`` and ``old``'s source; every use of ``old``'s output moves to the new
        output, which takes its name. Then the nodes of ``remove`` (default: ``old``; users
        before producers) are destroyed. Returns the new node."""
        new = self.create(kind, inputs, output_types=[old.output.type])
        new.schema = schema
        new.source = old.source
        new.meta = dict(old.meta)
        new.insert_before(old)
        name = old.output.name
        old.output.replace_all_uses_with(new.output)
        for node in (old,) if remove is None else remove:
            node.destroy()
        new.output.set_name(name)  # after the destroys released it
        return new

    def constant(self, value: Any, type: T.Type, before: Node | None = None,
                 block: Block | None = None) -> Value:
        """A ``prim::Constant`` holding ``value``; placed before ``before``, else at the
        start of ``block`` (default: the top-level block)."""
        node = self.create("prim::Constant", output_types=[type])
        if value is not None:
            node.attrs["value"] = value
        if before is not None:
            node.insert_before(before)
        else:
            (block or self.block).prepend(node)
        return node.output

    def walk(self) -> Iterator[Node]:
        return self.block.walk()

    def __str__(self) -> str:
        from static_runtime.ir.printer import print_graph

        return print_graph(self)


@dataclass
class Argument:
    name: str
    has_default: bool = False
    default: Any = None
    kwarg_only: bool = False


@dataclass
class Signature:
    """The Python-level signature of the graph's function (graph inputs in order)."""

    arguments: list[Argument]
    #: Whether the first graph input is ``self`` (a module), bound by the frontend.
    has_self: bool = False


_LEGAL_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.]*$")
_SUFFIX = re.compile(r"\.\d+$")
