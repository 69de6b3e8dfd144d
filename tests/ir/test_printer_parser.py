"""The canonical text form: printing, parsing, and print(parse(print(g))) == print(g)."""

from __future__ import annotations

import math
from typing import Any

import pytest
import torch

from static_runtime.ir import types as T
from static_runtime.ir.graph import Graph, Node, Value
from static_runtime.ir.parser import IRParseError, parse_graph, resolve_kind
from static_runtime.ir.printer import (
    format_attr_value,
    print_graph,
    print_graph_with_constants,
    render_graph,
)
from static_runtime.ir.verifier import verify

ADD_TENSOR = str(torch.ops.aten.add.Tensor._schema)
LINEAR = str(torch.ops.aten.linear.default._schema)
RELU = str(torch.ops.aten.relu.default._schema)
BOOL_TENSOR = str(torch.ops.aten.Bool.Tensor._schema)

WEIGHT = torch.arange(16.0).reshape(4, 4)

#: Attribute values of every literal form, and the type of the constant holding each.
CONSTANTS: list[tuple[Any, T.Type]] = [
    (7, T.Int),
    (-3, T.Int),
    (2**40, T.Int),
    (1.0, T.Float),
    (1e-05, T.Float),
    (-2.5e300, T.Float),
    (math.inf, T.Float),
    (-math.inf, T.Float),
    (math.nan, T.Float),
    (True, T.Bool),
    (False, T.Bool),
    ('say "hi"\nand\tbye \\ # ] ) ,', T.Str),
    ("", T.Str),
    ("ünïcødé", T.Str),
    (torch.device("cpu"), T.Device),
    (torch.device("cuda", 1), T.Device),
    (torch.float32, T.Int),
    (torch.int64, T.Int),
    ([1, 2, 3], T.ListType(T.Int)),
    ([], T.ListType(T.Int)),
    ([0.5, -1.0, math.inf], T.ListType(T.Float)),
    ((1,), T.TupleType((T.Int,))),
    ((), T.TupleType(())),
    ((1, "a", None, 2.0), T.Any),
    ([[1, 2], [3], []], T.ListType(T.ListType(T.Int))),
    ([(1, [True, False]), (2, [])], T.Any),
    (WEIGHT, T.TensorType(torch.float32, (4, 4))),
    ([WEIGHT, WEIGHT], T.ListType(T.Tensor)),
]


def _add(graph: Graph, block, kind: str, inputs: list[Value], types: list[T.Type],
         names: list[str | None] | None = None, **attrs: Any) -> Node:
    node = graph.create(kind, inputs)
    for i, t in enumerate(types):
        node.add_output(t, names[i] if names else None)
    node.attrs.update(attrs)
    block.append(node)
    return node


def build_rich_graph() -> Graph:
    """Constants of every kind; prim::If in prim::Loop in prim::If; multi- and zero-output
    nodes; schemas with and without overloads; source comments."""
    g = Graph()
    x = g.add_input(T.Tensor, "x.1")
    n = g.add_input(T.Int, "n")
    flag = g.add_input(T.Bool, "flag")
    obj = g.add_input(T.ClassType("__torch__.M"), "self")
    pair = g.add_input(T.TupleType((T.Int, T.Tensor)), "pair")

    for value, t in CONSTANTS:
        _add(g, g.block, "prim::Constant", [], [t], value=value)
    none = _add(g, g.block, "prim::Constant", [], [T.NoneT]).output
    one = _add(g, g.block, "prim::Constant", [], [T.Int], value=1).output
    true = _add(g, g.block, "prim::Constant", [], [T.Bool], names=["true"], value=True).output
    w = _add(g, g.block, "prim::Constant", [], [T.TensorType(torch.float32, (4, 4))],
             names=["w"], value=WEIGHT).output

    a, b = _add(g, g.block, "prim::TupleUnpack", [pair], [T.Int, T.Tensor],
                names=["a", "b"]).outputs
    added = _add(g, g.block, "aten::add", [x, w, one], [T.Tensor])
    added.schema = ADD_TENSOR
    added.source = "model.py:12"
    lin = _add(g, g.block, "aten::linear", [added.output, w, none], [T.Tensor])
    lin.schema = LINEAR
    _add(g, g.block, "prim::SetAttr", [obj, a], [], name="b")

    outer = _add(g, g.block, "prim::If", [flag], [T.Tensor, T.Int])
    outer.source = "model.py:20"
    then, other = outer.add_block(), outer.add_block()

    loop = _add(g, then, "prim::Loop", [n, true, lin.output, a], [T.Tensor, T.Int])
    body = loop.add_block()
    i = body.add_input(T.Int, "i")
    z = body.add_input(T.Tensor, "z")
    acc = body.add_input(T.Int, "acc")
    cond = _add(g, body, "aten::Bool", [z], [T.Bool], names=["c"])
    cond.schema = BOOL_TENSOR
    inner = _add(g, body, "prim::If", [cond.output], [T.Tensor])
    in_then, in_else = inner.add_block(), inner.add_block()
    relu = _add(g, in_then, "aten::relu", [z], [T.Tensor])
    relu.schema = RELU
    relu.source = "model.py:15"
    in_then.add_output(relu.output)
    _add(g, in_else, "prim::SetAttr", [obj, i], [], name="count")
    in_else.add_output(b)
    body.add_output(true)
    body.add_output(inner.output)
    body.add_output(acc)
    then.add_output(loop.outputs[0])
    then.add_output(loop.outputs[1])

    other.add_output(x)
    other.add_output(a)

    g.add_output(outer.outputs[0])
    g.add_output(outer.outputs[1])
    return g


def _same_value(a: Any, b: Any) -> bool:
    """Equal, with nan equal to nan, containers compared by type, tensors by identity."""
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        return a is b
    if type(a) is not type(b):
        return False
    if isinstance(a, float):
        return a == b or (math.isnan(a) and math.isnan(b))
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(_same_value(x, y) for x, y in zip(a, b, strict=True))
    return a == b


def _assert_same_graph(g1: Graph, g2: Graph) -> None:
    assert [v.name for v in g1.inputs] == [v.name for v in g2.inputs]
    assert [v.type for v in g1.inputs] == [v.type for v in g2.inputs]
    nodes1, nodes2 = list(g1.walk()), list(g2.walk())
    assert len(nodes1) == len(nodes2)
    for n1, n2 in zip(nodes1, nodes2, strict=True):
        assert n1.kind == n2.kind
        assert n1.source == n2.source
        assert sorted(n1.attrs) == sorted(n2.attrs)
        for key in n1.attrs:
            assert _same_value(n1.attrs[key], n2.attrs[key]), (key, n1.attrs[key])
        assert [v.name for v in n1.outputs] == [v.name for v in n2.outputs]
        assert [v.type for v in n1.outputs] == [v.type for v in n2.outputs]
        assert [v.name for v in n1.inputs] == [v.name for v in n2.inputs]
        assert len(n1.blocks) == len(n2.blocks)
        if n1.schema is not None:
            assert n2.schema == n1.schema


# ---------------------------------------------------------------------------- round trips


def test_rich_graph_round_trips() -> None:
    g = build_rich_graph()
    verify(g)
    text, constants = print_graph_with_constants(g)
    g2 = parse_graph(text, constants)
    verify(g2)
    assert print_graph(g2, constants) == text
    _assert_same_graph(g, g2)


def test_round_trip_is_stable_over_several_generations() -> None:
    text, constants = print_graph_with_constants(build_rich_graph())
    for _ in range(3):
        text2 = print_graph(parse_graph(text, constants), constants)
        assert text2 == text


def test_schemas_survive_the_round_trip() -> None:
    text, constants = print_graph_with_constants(build_rich_graph())
    g2 = parse_graph(text, constants)
    schemas = {n.kind: n.schema for n in g2.walk() if n.schema is not None}
    assert schemas["aten::add"] == ADD_TENSOR
    assert schemas["aten::linear"] == LINEAR
    assert schemas["aten::relu"] == RELU
    assert schemas["aten::Bool"] == BOOL_TENSOR
    assert "aten::add.Tensor(%x.1, %w, %" in text
    assert " = aten::linear(" in text


def test_values_keep_their_printed_names_even_numeric_ones() -> None:
    text = """graph(%7 : Tensor):
  %3 : int = prim::Constant[value=1]()
  %0 : Tensor = aten::add.Tensor(%7, %7, %3)
  return (%0)
"""
    g = parse_graph(text)
    assert [v.name for v in g.inputs] == ["7"]
    assert [n.output.name for n in g.nodes] == ["3", "0"]
    assert print_graph(g) == text
    fresh = g.create("aten::relu", [g.outputs[0]], n_outputs=1)
    assert fresh.output.name not in {"7", "3", "0"}


def test_parser_uses_the_graph_api_so_use_lists_are_right() -> None:
    text, constants = print_graph_with_constants(build_rich_graph())
    g = parse_graph(text, constants)
    verify(g)  # checks use-lists in both directions
    (x,) = [v for v in g.inputs if v.name == "x.1"]
    assert sorted(u.user.kind for u in x.uses) == ["aten::add", "prim::Return"]


# ---------------------------------------------------------------------------- exact text


EXAMPLE = """graph(%x.1 : Tensor,
      %y : int,
      %obj : __torch__.M,
      %n : int):
  %true : bool = prim::Constant[value=True]()
  %2 : int = prim::Constant[value=1]()
  %w : Float(4, 4) = prim::Constant[value=<ref c0>]()
  %3 : Tensor = aten::add.Tensor(%x.1, %w, %2)  # model.py:12
  %c : bool = aten::Bool.Tensor(%3)
  %4 : Tensor = prim::If(%c)
    block0():
      %5 : Tensor = aten::relu(%3)
      -> (%5)
    block1():
      -> (%x.1)
   = prim::SetAttr[name="b"](%obj, %2)
  %6 : Tensor = prim::Loop(%n, %true, %4)
    block0(%i : int, %z : Tensor):
      %a : int, %b : Tensor = prim::TupleUnpack(%t)
      -> (%true, %z)
  return (%6)
"""


def test_the_documented_example_round_trips_exactly() -> None:
    text = EXAMPLE.replace("%a : int, %b : Tensor = prim::TupleUnpack(%t)",
                           "%t : (int, Tensor) = prim::TupleConstruct(%i, %z)\n"
                           "      %a : int, %b : Tensor = prim::TupleUnpack(%t)")
    constants = {"c0": WEIGHT}
    g = parse_graph(text, constants)
    verify(g)
    assert print_graph(g, constants) == text
    add = g.nodes[3]
    assert (add.kind, add.schema, add.source) == ("aten::add", ADD_TENSOR, "model.py:12")
    set_attr = g.nodes[6]
    assert set_attr.outputs == [] and set_attr.attrs == {"name": "b"}
    assert g.nodes[2].attrs["value"] is WEIGHT


def test_graph_without_inputs_and_with_several_outputs() -> None:
    g = Graph()
    a = g.constant(1, T.Int)
    b = g.constant("s", T.Str)
    g.add_output(a)
    g.add_output(b)
    text = print_graph(g)
    assert text.startswith("graph():\n")
    assert text.endswith(f"  return (%{a.name}, %{b.name})\n")
    assert print_graph(parse_graph(text)) == text


def test_empty_return() -> None:
    text = "graph(%x : Tensor):\n  return ()\n"
    assert print_graph(parse_graph(text)) == text


def test_attributes_print_in_sorted_key_order() -> None:
    g = Graph()
    node = g.create("myns::op")
    node.attrs.update(zeta=1, alpha=2.0, mid="m")
    g.block.append(node)
    assert '= myns::op[alpha=2.0, mid="m", zeta=1]()' in print_graph(g)


def test_none_constant_has_no_attributes() -> None:
    g = Graph()
    g.add_output(g.constant(None, T.NoneT))
    assert "%0 : NoneType = prim::Constant()" in print_graph(g)


@pytest.mark.parametrize(("value", "text"), [
    (1, "1"),
    (-12, "-12"),
    (1.0, "1.0"),
    (1e-05, "1e-05"),
    (2.5e20, "2.5e+20"),
    (math.inf, "inf"),
    (-math.inf, "-inf"),
    (math.nan, "nan"),
    (True, "True"),
    (False, "False"),
    (None, "None"),
    ('a "q"\n', '"a \\"q\\"\\n"'),
    ([1, 2], "[1, 2]"),
    ([], "[]"),
    ((1,), "(1,)"),
    ((), "()"),
    ((1, 2.0), "(1, 2.0)"),
    ([[1], (2,)], "[[1], (2,)]"),
    (torch.device("cpu"), 'device("cpu")'),
    (torch.device("cuda:0"), 'device("cuda:0")'),
    (torch.float32, "dtype(float32)"),
    (torch.bfloat16, "dtype(bfloat16)"),
])
def test_literal_syntax(value: Any, text: str) -> None:
    assert format_attr_value(value) == text


# ---------------------------------------------------------------------------- references


def test_refs_get_fresh_names_and_are_looked_up_by_identity() -> None:
    t1, t2 = torch.zeros(2), torch.zeros(2)  # equal, but distinct objects
    g = Graph()
    for t in (t1, t2, t1):
        g.constant(t, T.Tensor)
    text, constants = print_graph_with_constants(g)
    # graph.constant prepends: the nodes print as t1, t2, t1.
    assert [line.split("=<ref ")[1][:2] for line in text.splitlines()[1:4]] == ["c0", "c1", "c0"]
    assert constants["c0"] is t1 and constants["c1"] is t2


def test_refs_reuse_caller_names_and_avoid_clashes() -> None:
    t1, t2 = torch.ones(1), torch.ones(1)
    obj = object()
    g = Graph()
    g.constant(t1, T.Tensor)
    g.constant(t2, T.Tensor)
    g.constant(obj, T.Any)
    constants: dict[str, Any] = {"c0": t2, "weights": t1}
    text = print_graph(g, constants)
    assert "value=<ref weights>" in text and "value=<ref c0>" in text
    assert "value=<ref c1>" in text and constants["c1"] is obj
    g2 = parse_graph(text, constants)
    values = [n.attrs["value"] for n in g2.nodes]
    assert values[0] is obj and values[1] is t2 and values[2] is t1


def test_render_graph_maps_nodes_to_lines() -> None:
    g = build_rich_graph()
    rendered = render_graph(g)
    for node in g.walk():
        line = rendered.lines[rendered.node_line[node]]
        assert f"= {node.kind}" in line
    assert rendered.lines[rendered.node_line[g.block.return_node]].startswith("  return (")
    assert rendered.lines[rendered.node_line[g.block.param_node]].startswith("graph(")


# ---------------------------------------------------------------------------- kinds


def test_resolve_kind() -> None:
    assert resolve_kind("aten::add.Tensor") == ("aten::add", ADD_TENSOR)
    assert resolve_kind("aten::linear") == ("aten::linear", LINEAR)
    assert resolve_kind("prim::Constant") == ("prim::Constant", None)
    assert resolve_kind("prim::ListConstruct") == ("prim::ListConstruct", None)
    assert resolve_kind("prim::If") == ("prim::If", None)
    assert resolve_kind("myns::thing") == ("myns::thing", None)
    assert resolve_kind("myns::thing.x") == ("myns::thing.x", None)
    assert resolve_kind("aten::__getitem__.t")[1].startswith("aten::__getitem__.t(")
    with pytest.raises(LookupError, match="no overload 'Nope'"):
        resolve_kind("aten::add.Nope")


def test_source_comments() -> None:
    text = """graph(%x : Tensor):
  %1 : Tensor = aten::relu(%x) # /tmp/t.py:11:4
  # a comment line on its own is ignored
  %2 : Tensor = aten::relu(%1)
  return (%2)  # not a node: ignored
"""
    g = parse_graph(text)
    assert [n.source for n in g.nodes] == ["/tmp/t.py:11:4", None]


def test_printer_keeps_source_on_one_line() -> None:
    g = Graph()
    node = g.create("aten::relu", [g.add_input(T.Tensor, "x")], n_outputs=1)
    node.source = "a.py:1\nb.py:2"
    g.block.append(node)
    assert print_graph(g).splitlines()[1].endswith("  # a.py:1 b.py:2")


# ---------------------------------------------------------------------------- errors


GOOD = """graph(%x : Tensor,
      %flag : bool):
  %1 : Tensor = prim::If(%flag)
    block0():
      %inner : Tensor = aten::relu(%x)
      -> (%inner)
    block1():
      -> (%x)
  return (%1)
"""


@pytest.mark.parametrize(("text", "line", "message"), [
    (GOOD.replace("aten::relu(%x)", "aten::relu(%q)"), 5, "undefined value %q"),
    (GOOD.replace("return (%1)", "return (%inner)"), 9,
     "%inner (defined on line 5) is not visible here"),
    (GOOD.replace("-> (%x)", "-> (%1)"), 8, "%1 (defined on line 3) is not visible"),
    (GOOD.replace("%inner : Tensor", "%x : Tensor"), 5,
     "value %x is defined twice (first on line 1)"),
    (GOOD.replace("%flag : bool", "%flag : Dict(str"), 2, "cannot read type"),
    (GOOD.replace("%flag : bool", "%flag : "), 2, "expected a type"),
    (GOOD.replace("aten::relu(%x)", "aten::relu.Nope(%x)"), 5, "no overload 'Nope'"),
    (GOOD.replace("aten::relu(%x)", "relu(%x)"), 5, "expected a node kind"),
    (GOOD.replace("aten::relu(%x)", "aten::relu[value=<ref w>](%x)"), 5,
     "<ref w> is not in the constants table"),
    (GOOD.replace("aten::relu(%x)", "aten::relu[value=@](%x)"), 5,
     "expected an attribute value, found '@'"),
    (GOOD.replace("aten::relu(%x)", 'aten::relu[s="abc](%x)'), 5, "string literal"),
    (GOOD.replace("aten::relu(%x)", "aten::relu[a=1, a=2](%x)"), 5,
     "attribute 'a' is given twice"),
    (GOOD.replace("aten::relu(%x)", "aten::relu[d=dtype(banana)](%x)"), 5,
     "unknown dtype 'banana'"),
    (GOOD.replace("block1", "block2"), 7, "expected block1, found block2"),
    (GOOD.replace("      -> (%x)\n", ""), 8, "expected a node or '->', found 'return'"),
    (GOOD + "  %9 : int = prim::Constant()\n", 10, "after the return statement"),
    (GOOD.replace("  return (%1)\n", ""), 9, "the text ends before 'return'"),
    (GOOD.replace("graph(", "grph("), 1, "expected 'graph'"),
    (GOOD.replace("%x : Tensor,", "%x : Tensor"), 2, "expected ',' or ')', found '%flag'"),
    (GOOD.replace("(%flag)", "(%flag %x)"), 3, "expected ',' or ')', found '%x'"),
])
def test_parse_errors_name_line_and_problem(text: str, line: int, message: str) -> None:
    with pytest.raises(IRParseError) as info:
        parse_graph(text)
    assert str(info.value).startswith(f"line {line}, column ")
    assert message in str(info.value)


def test_parse_error_shows_the_line_and_a_caret() -> None:
    with pytest.raises(IRParseError) as info:
        parse_graph(GOOD.replace("aten::relu(%x)", "aten::relu(%q)"))
    lines = str(info.value).splitlines()
    assert lines[0] == "line 5, column 37: undefined value %q"
    assert lines[1].strip() == "%inner : Tensor = aten::relu(%q)"
    assert lines[2].index("^") == lines[1].index("q")


def test_parse_error_is_a_value_error() -> None:
    assert issubclass(IRParseError, ValueError)


# ---------------------------------------------------------------------------- TorchScript


def _from_torchscript(tg: torch._C.Graph) -> Graph:
    """A small local converter, independent of the frontend, for round-tripping real graphs."""
    graph = Graph()
    env: dict[int, Value] = {}
    for tv in tg.inputs():
        env[tv.unique()] = graph.add_input(T.from_torch(tv.type()), tv.debugName())

    def convert(nodes, block) -> None:
        for tn in nodes:
            node = graph.create(tn.kind(), [env[v.unique()] for v in tn.inputs()])
            for to in tn.outputs():
                env[to.unique()] = node.add_output(T.from_torch(to.type()), to.debugName())
            schema = tn.schema()
            node.schema = None if schema == "(no schema)" else schema
            if tn.kind() == "prim::Constant":
                if tn.hasAttribute("value"):
                    node.attrs["value"] = tn.output().toIValue()
            else:
                for name in tn.attributeNames():
                    node.attrs[name] = getattr(tn, tn.kindOf(name))(name)
            block.append(node)
            for tb in tn.blocks():
                sub = node.add_block()
                for tv in tb.inputs():
                    env[tv.unique()] = sub.add_input(T.from_torch(tv.type()), tv.debugName())
                convert(tb.nodes(), sub)
                for tv in tb.outputs():
                    sub.add_output(env[tv.unique()])

    convert(tg.nodes(), graph.block)
    for tv in tg.outputs():
        graph.add_output(env[tv.unique()])
    return graph


def loops_and_ifs(x: torch.Tensor, n: int, s: str) -> tuple[torch.Tensor, str]:
    y = x
    for i in range(n):
        if bool(y.sum() > 0.5):
            y = y + i
        else:
            k = 0
            while k < i:
                y = torch.relu(y) * 2.5
                k += 1
    a, b = y.chunk(2)
    return a + b, s + 'x"\n'


def containers(xs: list[torch.Tensor], d: dict[str, int], o: torch.Tensor | None) -> torch.Tensor:
    total = torch.zeros(3)
    for key, value in d.items():
        if key == "skip":
            continue
        total = total + value
    for t in xs:
        total = total + t
    if o is not None:
        total = total * o
    return total.to(torch.float64).view([-1, 1])


class Model(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(3, 3)
        self.count = 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.count += 1
        for _ in range(2):
            x = torch.relu(self.lin(x))
        return x


def _torchscript_graphs() -> list[tuple[str, torch._C.Graph]]:
    frozen = torch.jit.freeze(torch.jit.script(Model().eval()))
    return [
        ("loops_and_ifs", torch.jit.script(loops_and_ifs).graph),
        ("containers", torch.jit.script(containers).graph),
        ("module", torch.jit.script(Model()).graph),
        ("frozen_module", frozen.graph),
    ]


@pytest.mark.parametrize(("name", "tg"), _torchscript_graphs(), ids=lambda p: p
                         if isinstance(p, str) else "")
def test_torchscript_graphs_round_trip(name: str, tg: torch._C.Graph) -> None:
    g = _from_torchscript(tg)
    verify(g)
    text, constants = print_graph_with_constants(g)
    g2 = parse_graph(text, constants)
    verify(g2)
    assert print_graph(g2, constants) == text
    _assert_same_graph(g, g2)
    assert any(n.schema for n in g2.walk())


@pytest.mark.parametrize(("name", "tg"), _torchscript_graphs(), ids=lambda p: p
                         if isinstance(p, str) else "")
def test_frontend_graphs_round_trip(name: str, tg: torch._C.Graph) -> None:
    frontend = pytest.importorskip("static_runtime.frontend.torchscript")
    if not hasattr(frontend, "import_graph"):
        pytest.skip("the TorchScript frontend has no import_graph yet")
    g = frontend.import_graph(tg)
    verify(g)
    text, constants = print_graph_with_constants(g)
    g2 = parse_graph(text, constants)
    verify(g2)
    assert print_graph(g2, constants) == text
    _assert_same_graph(g, g2)
