"""Read a graph back from its canonical text form (see ``static_runtime.ir.printer``).

The grammar, whitespace- and indentation-insensitive (``#`` starts a comment; a comment on
the same line as a node, after its input list, is that node's ``source``)::

    graph     := "graph" "(" [decl ("," decl)*] ")" ":" node* "return" "(" uses ")"
    node      := [decl ("," decl)*] "=" KIND ["[" attr ("," attr)* "]"] "(" uses ")" block*
                 [subgraph]
    block     := "block" N "(" [decl ("," decl)*] ")" ":" node* "->" "(" uses ")"
    subgraph  := "subgraph" "(" [decl ("," decl)*] ")" ":" node* "return" "(" uses ")"
    decl      := "%" NAME ":" TYPE
    uses      := ["%" NAME ("," "%" NAME)*]
    attr      := KEY "=" literal
    literal   := INT | FLOAT | "True" | "False" | "None" | STRING | "[" literals "]"
               | "(" literals ")" | "device(" STRING ")" | "dtype(" NAME ")" | "<ref" NAME ">"

Values must be defined before they are used, in the same block or an enclosing one, and
keep the names they are printed with. A ``subgraph`` is a function of its own (the node's
``SUBGRAPH`` attribute): its names are its own and it sees nothing of the enclosing graph.
"""

from __future__ import annotations

import json
import re
from typing import Any, NoReturn

import torch

from static_runtime.ir import types as T
from static_runtime.ir.graph import SUBGRAPH, Block, Graph, Value


class IRParseError(ValueError):
    """The text is not a graph in the canonical form; the message gives line, column and why."""


def parse_graph(text: str, constants: dict[str, Any] | None = None) -> Graph:
    """Build the graph that ``text`` prints.

    ``<ref NAME>`` attribute values are looked up in ``constants`` (the table
    ``print_graph_with_constants`` returns). A node kind with an overload (``aten::add.Tensor``)
    whose operator PyTorch knows becomes ``kind="aten::add"`` with that overload's schema; a
    kind without one gets the schema of the operator's ``default`` overload if there is one.
    """
    return _Parser(text, constants if constants is not None else {}).parse()


def resolve_kind(text: str) -> tuple[str, str | None]:
    """``(kind, schema)`` for a printed node kind such as ``aten::add.Tensor``.

    Raises ``LookupError`` when PyTorch knows the operator but not the overload named.
    Kinds of operators PyTorch does not know (``prim::Constant``, ``myns::op.x``) are
    returned unchanged, without a schema.
    """
    if text in _RESOLVED:
        return _RESOLVED[text]
    ns, _, rest = text.partition("::")
    name, _, overload = rest.partition(".")
    packet = _op_packet(ns, name)
    if packet is None:
        return text, None
    if overload:
        if overload not in packet.overloads():
            raise LookupError(f"{ns}::{name} has no overload {overload!r}")
        resolved = f"{ns}::{name}", str(getattr(packet, overload)._schema)
    elif "default" in packet.overloads():
        resolved = text, str(packet.default._schema)
    else:
        return text, None
    _RESOLVED[text] = resolved
    return resolved


#: Kinds resolved to a schema. Misses are not cached: an operator may be registered later.
_RESOLVED: dict[str, tuple[str, str]] = {}


def _op_packet(ns: str, name: str) -> torch._ops.OpOverloadPacket | None:
    if not (ns.isidentifier() and name.isidentifier()):
        return None
    try:
        packet = getattr(getattr(torch.ops, ns), name)
    except (AttributeError, RuntimeError):
        return None
    return packet if isinstance(packet, torch._ops.OpOverloadPacket) else None


_VALUE_NAME = re.compile(r"[A-Za-z0-9_.]+")
_KIND = re.compile(r"[A-Za-z_]\w*::\w+(?:\.\w+)?")
_KEY = re.compile(r"[A-Za-z_]\w*")
_BLOCK = re.compile(r"block(\d+)\(")
_NUMBER = re.compile(
    r"-?(?:\d+\.\d*(?:[eE][+-]?\d+)?|\d+[eE][+-]?\d+|\d+|inf|nan)(?![\w.])")
_KEYWORD = re.compile(r"(True|False|None)(?!\w)")
_STRING = re.compile(r'"(?:[^"\\\n]|\\.)*"')
_REF = re.compile(r"<ref\s+([^\s>]+)\s*>")
_DTYPE = re.compile(r"dtype\(\s*(\w+)\s*\)")
#: What ``found`` quotes: a word (``%x.1``, ``aten::add``, ``return``) or one character.
_WORD = re.compile(r"%?[\w.:]{1,40}|->|\S")
_KEYWORD_VALUES = {"True": True, "False": False, "None": None}


class _Parser:
    def __init__(self, text: str, constants: dict[str, Any]):
        self.text = text
        self.pos = 0
        self.constants = constants
        self.graph = Graph()
        #: Names visible at the current point, innermost block last.
        self.scopes: list[dict[str, Value]] = []
        #: Where (text offset) each name defined so far is defined, visible here or not.
        self.defined: dict[str, int] = {}
        self._types: dict[str, T.Type] = {}

    # ------------------------------------------------------------------ structure

    def parse(self) -> Graph:
        self.expect("graph")
        self.function()
        self.skip_ws()
        if self.pos != len(self.text):
            self.fail(f"unexpected {self.found()} after the return statement")
        return self.graph

    def function(self) -> Graph:
        """``(decls): node* return (uses)`` into ``self.graph``, from ``self.pos``."""
        self.expect("(")
        decls = self.decl_list(")")
        self.expect(")")
        self.expect(":")
        self.scopes.append({})
        for name, type, pos in decls:
            self.define(self.graph.add_input(type, name), name, pos)
        self.body(self.graph.block, "return")
        self.expect("return")
        for v in self.use_list():
            self.graph.add_output(v)
        return self.graph

    def body(self, block: Block, terminator: str) -> None:
        """Nodes up to (not including) ``terminator``."""
        while True:
            self.skip_ws()
            if self.at_end():
                self.fail(f"the text ends before {terminator!r} closes the block")
            char = self.text[self.pos]
            if char in "%=":
                self.node(block)
            elif self.text.startswith(terminator, self.pos):
                return
            else:
                self.fail(f"expected a node or {terminator!r}, found {self.found()}")

    def node(self, block: Block) -> None:
        outputs = self.decl_list("=")
        self.expect("=")
        self.skip_ws()
        kind_pos = self.pos
        kind_text = self.match(_KIND, "a node kind such as aten::add.Tensor")
        try:
            kind, schema = resolve_kind(kind_text)
        except LookupError as e:
            self.fail(str(e), kind_pos)
        attrs = self.attrs() if self.text.startswith("[", self.pos) else {}
        inputs = self.use_list()
        node = self.graph.create(kind, inputs)
        node.schema = schema
        node.attrs = attrs
        node.source = self.source_comment()
        for name, type, pos in outputs:
            self.define_later(node.add_output(type, name), name, pos)
        block.append(node)
        while True:
            self.skip_ws()
            m = _BLOCK.match(self.text, self.pos)
            if m is None:
                break
            if int(m.group(1)) != len(node.blocks):
                self.fail(f"expected block{len(node.blocks)}, found block{m.group(1)}")
            self.pos = m.end()
            self.sub_block(node.add_block())
        self.skip_ws()
        if self.text.startswith(SUBGRAPH + "(", self.pos):
            if SUBGRAPH in node.attrs:
                self.fail(f"the node has a {SUBGRAPH!r} attribute and a subgraph")
            inner = _Parser(self.text, self.constants)
            inner.pos = self.pos + len(SUBGRAPH)
            node.attrs[SUBGRAPH] = inner.function()
            self.pos = inner.pos
        # A node's outputs are visible after the node, not inside its own blocks.
        for value in node.outputs:
            self.scopes[-1][value.name] = value

    def sub_block(self, block: Block) -> None:
        decls = self.decl_list(")")
        self.expect(")")
        self.expect(":")
        self.scopes.append({})
        for name, type, pos in decls:
            self.define(block.add_input(type, name), name, pos)
        self.body(block, "->")
        self.expect("->")
        for v in self.use_list():
            block.add_output(v)
        self.scopes.pop()

    def source_comment(self) -> str | None:
        pos = self.pos
        while pos < len(self.text) and self.text[pos] in " \t":
            pos += 1
        if pos < len(self.text) and self.text[pos] == "#":
            end = self.text.find("\n", pos)
            end = len(self.text) if end < 0 else end
            self.pos = end
            return self.text[pos + 1:end].strip()
        return None

    # ------------------------------------------------------------------ values

    def decl_list(self, close: str) -> list[tuple[str, T.Type, int]]:
        """``%name : Type`` declarations separated by commas, up to (not including) ``close``."""
        decls: list[tuple[str, T.Type, int]] = []
        self.skip_ws()
        if not self.peek(close):
            while True:
                decls.append(self.decl())
                if self.peek(","):
                    self.expect(",")
                    continue
                if self.peek(close):
                    break
                self.fail(f"expected ',' or {close!r}, found {self.found()}")
        return decls

    def decl(self) -> tuple[str, T.Type, int]:
        self.expect("%")
        pos = self.pos
        name = self.match(_VALUE_NAME, "a value name")
        self.expect(":")
        return name, self.type(), pos

    def type(self) -> T.Type:
        self.skip_ws()
        start, depth = self.pos, 0
        while self.pos < len(self.text):
            char = self.text[self.pos]
            if char in "([":
                depth += 1
            elif char in ")]":
                if depth == 0:
                    break
                depth -= 1
            elif (char in ",=" and depth == 0) or char in "\n#":
                break
            self.pos += 1
        spelling = self.text[start:self.pos].strip()
        if not spelling:
            self.fail(f"expected a type, found {self.found()}", start)
        if spelling not in self._types:
            try:
                self._types[spelling] = T.parse_type(spelling)
            except T.TypeParseError as e:
                self.fail(str(e), start)
        return self._types[spelling]

    def define(self, value: Value, name: str, pos: int) -> None:
        self.define_later(value, name, pos)
        self.scopes[-1][name] = value

    def define_later(self, value: Value, name: str, pos: int) -> None:
        """Check ``name`` is new and give it to ``value`` (visible once the caller says so)."""
        if name in self.defined:
            first = self.line_of(self.defined[name])
            self.fail(f"value %{name} is defined twice (first on line {first})", pos)
        self.defined[name] = pos
        _claim_name(value, name)

    def use_list(self) -> list[Value]:
        self.expect("(")
        values: list[Value] = []
        self.skip_ws()
        if self.peek(")"):
            self.expect(")")
            return values
        while True:
            self.expect("%")
            pos = self.pos
            values.append(self.lookup(self.match(_VALUE_NAME, "a value name"), pos))
            if self.peek(","):
                self.expect(",")
            elif self.peek(")"):
                self.expect(")")
                return values
            else:
                self.fail(f"expected ',' or ')', found {self.found()}")

    def lookup(self, name: str, pos: int) -> Value:
        for scope in reversed(self.scopes):
            if name in scope:
                return scope[name]
        if name in self.defined:
            line = self.line_of(self.defined[name])
            self.fail(f"value %{name} (defined on line {line}) is not visible "
                      "here: it is defined later, or inside a block this use is not in", pos)
        self.fail(f"undefined value %{name}", pos)

    # ------------------------------------------------------------------ attributes

    def attrs(self) -> dict[str, Any]:
        self.expect("[")
        attrs: dict[str, Any] = {}
        while True:
            self.skip_ws()
            pos = self.pos
            key = self.match(_KEY, "an attribute name")
            if key in attrs:
                self.fail(f"attribute {key!r} is given twice", pos)
            self.expect("=")
            attrs[key] = self.literal()
            if self.peek(","):
                self.expect(",")
            elif self.peek("]"):
                self.expect("]")
                return attrs
            else:
                self.fail(f"expected ',' or ']' in the attribute list, found {self.found()}")

    def literal(self) -> Any:
        self.skip_ws()
        text, pos = self.text, self.pos
        if text.startswith("[", pos):
            self.pos += 1
            return self.literal_items("]")
        if text.startswith("(", pos):
            self.pos += 1
            return tuple(self.literal_items(")"))
        if text.startswith('"', pos):
            return self.string()
        if text.startswith("device(", pos):
            self.pos += len("device(")
            spelling = self.string()
            self.expect(")")
            try:
                return torch.device(spelling)
            except RuntimeError as e:
                self.fail(f"bad device {spelling!r}: {e}", pos)
        if m := _DTYPE.match(text, pos):
            dtype = getattr(torch, m.group(1), None)
            if not isinstance(dtype, torch.dtype):
                self.fail(f"unknown dtype {m.group(1)!r}", pos)
            self.pos = m.end()
            return dtype
        if m := _REF.match(text, pos):
            name = m.group(1)
            if name not in self.constants:
                known = ", ".join(sorted(self.constants)) or "none"
                self.fail(f"<ref {name}> is not in the constants table (it has: {known})", pos)
            self.pos = m.end()
            return self.constants[name]
        if m := _KEYWORD.match(text, pos):
            self.pos = m.end()
            return _KEYWORD_VALUES[m.group(1)]
        if m := _NUMBER.match(text, pos):
            self.pos = m.end()
            spelling = m.group(0)
            if any(c in spelling for c in ".eEn"):  # "n" from inf and nan
                return float(spelling)
            return int(spelling)
        self.fail(f"expected an attribute value, found {self.found()}")

    def literal_items(self, close: str) -> list[Any]:
        items: list[Any] = []
        while True:
            if self.peek(close):
                self.expect(close)
                return items
            items.append(self.literal())
            if self.peek(","):
                self.expect(",")
            elif not self.peek(close):
                self.fail(f"expected ',' or {close!r}, found {self.found()}")

    def string(self) -> str:
        pos = self.pos
        m = _STRING.match(self.text, pos)
        if m is None:
            self.fail("unterminated or malformed string literal", pos)
        try:
            value = json.loads(m.group(0))
        except json.JSONDecodeError as e:
            self.fail(f"malformed string literal: {e.msg}", pos)
        self.pos = m.end()
        return value

    # ------------------------------------------------------------------ lexing

    def skip_ws(self) -> None:
        text = self.text
        while self.pos < len(text):
            char = text[self.pos]
            if char in " \t\r\n":
                self.pos += 1
            elif char == "#":
                end = text.find("\n", self.pos)
                self.pos = len(text) if end < 0 else end
            else:
                return

    def at_end(self) -> bool:
        return self.pos >= len(self.text)

    def peek(self, token: str) -> bool:
        self.skip_ws()
        return self.text.startswith(token, self.pos)

    def expect(self, token: str) -> None:
        if not self.peek(token):
            self.fail(f"expected {token!r}, found {self.found()}")
        self.pos += len(token)

    def match(self, pattern: re.Pattern[str], what: str) -> str:
        self.skip_ws()
        m = pattern.match(self.text, self.pos)
        if m is None:
            self.fail(f"expected {what}, found {self.found()}")
        self.pos = m.end()
        return m.group(0)

    def found(self) -> str:
        if self.at_end():
            return "the end of the text"
        m = _WORD.match(self.text, self.pos)
        assert m is not None
        return repr(m.group(0))

    def line_of(self, pos: int) -> int:
        return self.text.count("\n", 0, pos) + 1

    def fail(self, message: str, pos: int | None = None) -> NoReturn:
        pos = self.pos if pos is None else pos
        line = self.line_of(pos)
        start = self.text.rfind("\n", 0, pos) + 1
        end = self.text.find("\n", pos)
        line_text = self.text[start:len(self.text) if end < 0 else end]
        column = pos - start + 1
        raise IRParseError(f"line {line}, column {column}: {message}\n"
                           f"    {line_text}\n    {' ' * (column - 1)}^")


def _claim_name(value: Value, name: str) -> None:
    """Give ``value`` exactly the printed ``name``.

    ``Value.set_name`` renumbers purely numeric names (they are reserved for unnamed values,
    as in TorchScript); a parsed graph keeps them so that printing it gives the text back.
    The parser has already checked that no other value of the graph holds ``name``.
    """
    if value.name == name:
        return
    graph = value.graph
    graph._release_name(value.name)
    value._name = name
    graph._names.add(name)
