"""The canonical text form of a graph, modelled on TorchScript's.

::

    graph(%x.1 : Tensor,
          %y : int):
      %2 : int = prim::Constant[value=1]()
      %3 : Tensor = aten::add.Tensor(%x.1, %x.1, %2)  # model.py:12
      %4 : Tensor = prim::If(%c)
        block0():
          -> (%3)
        block1():
          -> (%x.1)
       = prim::SetAttr[name="b"](%obj, %2)
      return (%4)

Attribute values print as literals (ints, floats, bools, strings, ``None``, lists,
tuples, ``device("cpu")``, ``dtype(float32)``); anything else (tensors, script
objects) prints as ``<ref NAME>`` and is recorded in a constants table under
``NAME``. ``static_runtime.ir.parser.parse_graph`` reads this form back.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Any

import torch

from static_runtime.ir.graph import SUBGRAPH, Block, Graph, Node, Value

_INDENT = "  "


@dataclass
class RenderedGraph:
    """A printed graph, line by line, with the line each node was printed on.

    ``node_line`` maps every printed node (including each block's ``prim::Param`` node, which
    maps to its ``graph(...)``/``blockN(...)`` header, and ``prim::Return`` node, which maps to
    its ``return``/``->`` line) to an index into ``lines``. Used by the verifier to show the IR
    around a bad node.
    """

    lines: list[str]
    node_line: dict[Node, int]
    constants: dict[str, Any] = field(default_factory=dict)

    @property
    def text(self) -> str:
        return "\n".join(self.lines) + "\n"


def print_graph(graph: Graph, constants: dict[str, Any] | None = None) -> str:
    """The canonical text form of ``graph``.

    Attribute values without a literal form are printed as ``<ref NAME>``: ``NAME`` is the key
    under which the object (by identity) already sits in ``constants``, or a fresh ``c0``,
    ``c1``, ... under which it is added. Pass a dict to read those objects afterwards.
    """
    return render_graph(graph, constants).text


def print_graph_with_constants(graph: Graph) -> tuple[str, dict[str, Any]]:
    """The text form of ``graph`` and the table of objects its ``<ref NAME>`` attributes name."""
    constants: dict[str, Any] = {}
    text = print_graph(graph, constants)
    return text, constants


def render_graph(graph: Graph, constants: dict[str, Any] | None = None) -> RenderedGraph:
    """Print ``graph`` and remember where each node went (see ``RenderedGraph``).

    Never fails on a structurally broken graph (a use before its definition, a broken
    use-list): the verifier prints such graphs to explain what is wrong with them.
    """
    printer = _Printer(constants if constants is not None else {})
    printer.graph(graph)
    return RenderedGraph(printer.lines, printer.node_line, printer.refs.constants)


def format_attr_value(value: Any, constants: dict[str, Any] | None = None) -> str:
    """One attribute value in literal syntax (``<ref NAME>`` for objects without one)."""
    return _Refs(constants if constants is not None else {}).format(value)


class _Refs:
    """Names objects that have no literal form, reusing the caller's names by identity."""

    def __init__(self, constants: dict[str, Any]):
        self.constants = constants
        self._by_id = {id(v): k for k, v in constants.items()}
        self._counter = 0

    def name_of(self, obj: Any) -> str:
        name = self._by_id.get(id(obj))
        if name is None:
            while f"c{self._counter}" in self.constants:
                self._counter += 1
            name = f"c{self._counter}"
            self.constants[name] = obj
            self._by_id[id(obj)] = name
        return name

    def format(self, value: Any) -> str:
        if value is None or isinstance(value, bool):
            return repr(value)
        if isinstance(value, int):
            return str(int(value))
        if isinstance(value, float):
            return _format_float(value)
        if isinstance(value, str):
            return json.dumps(value)
        if type(value) is list:
            return "[" + ", ".join(self.format(v) for v in value) + "]"
        if type(value) is tuple:
            if len(value) == 1:
                return f"({self.format(value[0])},)"
            return "(" + ", ".join(self.format(v) for v in value) + ")"
        if isinstance(value, torch.device):
            return f"device({json.dumps(str(value))})"
        if isinstance(value, torch.dtype):
            return f"dtype({str(value).removeprefix('torch.')})"
        return f"<ref {self.name_of(value)}>"


def _format_float(value: float) -> str:
    # repr() always contains ".", "e", "inf" or "nan", so a float never reads back as an int.
    if math.isnan(value):
        return "nan"
    return repr(float(value))


class _Printer:
    def __init__(self, constants: dict[str, Any]):
        self.refs = _Refs(constants)
        self.lines: list[str] = []
        self.node_line: dict[Node, int] = {}

    def graph(self, graph: Graph) -> None:
        params = [_decl(v) for v in graph.inputs]
        self.node_line[graph.block.param_node] = len(self.lines)
        if not params:
            self.lines.append("graph():")
        else:
            pad = " " * len("graph(")
            for i, p in enumerate(params):
                head = "graph(" if i == 0 else pad
                tail = "):" if i == len(params) - 1 else ","
                self.lines.append(head + p + tail)
        self.block_body(graph.block, 1)
        self.node_line[graph.block.return_node] = len(self.lines)
        self.lines.append(f"{_INDENT}return ({_uses(graph.outputs)})")

    def block_body(self, block: Block, depth: int) -> None:
        for node in block.nodes:
            self.node(node, depth)

    def node(self, node: Node, depth: int) -> None:
        indent = _INDENT * depth
        outs = ", ".join(_decl(v) for v in node.outputs)
        line = f"{indent}{outs} = {_kind_text(node)}{self.attrs(node)}({_uses(node.inputs)})"
        if node.source is not None:
            line += "  # " + node.source.replace("\r", " ").replace("\n", " ")
        self.node_line[node] = len(self.lines)
        self.lines.append(line)
        for i, block in enumerate(node.blocks):
            params = ", ".join(_decl(v) for v in block.inputs)
            self.node_line[block.param_node] = len(self.lines)
            self.lines.append(f"{indent}{_INDENT}block{i}({params}):")
            self.block_body(block, depth + 2)
            self.node_line[block.return_node] = len(self.lines)
            self.lines.append(f"{indent}{_INDENT * 2}-> ({_uses(block.outputs)})")
        subgraph = node.attrs.get(SUBGRAPH)
        if isinstance(subgraph, Graph):
            self.subgraph(subgraph, depth + 1)

    def subgraph(self, graph: Graph, depth: int) -> None:
        """A node's own function (``static_runtime::fused_region``): its names are its own."""
        indent = _INDENT * depth
        params = ", ".join(_decl(v) for v in graph.inputs)
        self.lines.append(f"{indent}{SUBGRAPH}({params}):")
        for node in graph.block.nodes:
            self.node(node, depth + 1)
        self.lines.append(f"{indent}{_INDENT}return ({_uses(graph.outputs)})")

    def attrs(self, node: Node) -> str:
        keys = sorted(k for k, v in node.attrs.items() if not isinstance(v, Graph))
        if not keys:
            return ""
        items = (f"{k}={self.refs.format(node.attrs[k])}" for k in keys)
        return "[" + ", ".join(items) + "]"


def _kind_text(node: Node) -> str:
    """``aten::add.Tensor`` when the schema names an overload of ``node.kind``, else the kind."""
    name = node.schema_name()
    if name is not None:
        base, _, overload = name.partition(".")
        if overload and base == node.kind:
            return name
    return node.kind


def _decl(value: Value) -> str:
    return f"%{value.name} : {value.type}"


def _uses(values: tuple[Value, ...] | list[Value]) -> str:
    return ", ".join(f"%{v.name}" for v in values)
