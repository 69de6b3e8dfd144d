"""inline: prim::CallFunction of a constant IR graph → the callee's body."""

import pytest
import torch
from passes_helpers import kinds, run_graph, run_pass

from static_runtime.ir import types as T
from static_runtime.ir.graph import Graph
from static_runtime.ir.verifier import verify
from static_runtime.passes.inline import InlineError, inline

FN = T.OpaqueType("Function")


def _node(g: Graph, kind: str, schema: str | None, inputs, out_types, block=None):
    n = g.create(kind, inputs, output_types=out_types)
    n.schema = schema
    (block or g.block).append(n)
    return n


def add_relu_callee() -> Graph:
    """callee(a, b) = relu(a + b), with the relu under an always-taken branch on a flag."""
    g = Graph()
    a = g.add_input(T.Tensor, "a")
    b = g.add_input(T.Tensor, "b")
    one = g.constant(1, T.Int)
    s = _node(g, "aten::add", "aten::add.Tensor(Tensor self, Tensor other, *, Scalar alpha=1) "
              "-> Tensor", [a, b, one], [T.Tensor]).output
    flag = g.constant(True, T.Bool)
    branch = _node(g, "prim::If", None, [flag], [T.Tensor])
    yes, no = branch.add_block(), branch.add_block()
    r = _node(g, "aten::relu", "aten::relu(Tensor self) -> Tensor", [s], [T.Tensor], yes)
    yes.add_output(r.output)
    no.add_output(s)
    g.add_output(branch.output)
    verify(g)
    return g


def caller_of(callee: Graph, n_calls: int = 1) -> Graph:
    """caller(x, y) = callee(callee(x, y), y) ... (n_calls deep) * 2"""
    g = Graph()
    x = g.add_input(T.Tensor, "x")
    y = g.add_input(T.Tensor, "y")
    fn = g.create("prim::Constant", output_types=[FN])
    fn.attrs["graph"] = callee
    g.block.append(fn)
    cur = x
    for _ in range(n_calls):
        cur = _node(g, "prim::CallFunction", None, [fn.output, cur, y], [T.Tensor]).output
    two = g.constant(2, T.Int)
    out = _node(g, "aten::mul", "aten::mul.Scalar(Tensor self, Scalar other) -> Tensor",
                [cur, two], [T.Tensor]).output
    g.add_output(out)
    from static_runtime.ir.graph import Argument, Signature

    g.signature = Signature([Argument("x"), Argument("y")])
    verify(g)
    return g


def test_call_is_replaced_by_the_callee_body():
    g = caller_of(add_relu_callee(), n_calls=2)
    assert run_pass("inline", g)
    assert "prim::CallFunction" not in kinds(g)
    assert kinds(g) == ["aten::add", "prim::If", "aten::relu", "aten::add", "prim::If",
                        "aten::relu", "aten::mul"]
    # the function constant is gone with its last call
    assert not any(n.attrs.get("graph") for n in g.walk())


def test_inlined_graph_computes_the_same():
    x, y = torch.randn(3, 4), torch.randn(3, 4)
    g = caller_of(add_relu_callee(), n_calls=2)
    run_pass("inline", g)
    expected = torch.relu(torch.relu(x + y) + y) * 2
    torch.testing.assert_close(run_graph(g, x, y), expected)
    x2, y2 = torch.randn(5), torch.randn(5)
    torch.testing.assert_close(run_graph(g, x2, y2), torch.relu(torch.relu(x2 + y2) + y2) * 2)


def test_calls_inside_callees_and_blocks_are_inlined():
    inner = add_relu_callee()
    outer = caller_of(inner)  # outer(x, y) = inner(x, y) * 2, itself a function
    g = caller_of(outer)
    assert inline(g)
    verify(g)
    assert "prim::CallFunction" not in kinds(g)
    x, y = torch.randn(4), torch.randn(4)
    torch.testing.assert_close(run_graph(g, x, y), torch.relu(x + y) * 4)


def test_leaves_other_calls_alone():
    g = Graph()
    x = g.add_input(T.Tensor, "x")
    fn = g.add_input(FN, "fn")  # not a constant: unknown callee
    call = _node(g, "prim::CallFunction", None, [fn, x], [T.Tensor])
    g.add_output(call.output)
    assert not inline(g)
    assert kinds(g) == ["prim::CallFunction"]


def test_recursion_is_refused():
    g = caller_of(add_relu_callee())
    fn = next(n for n in g.walk() if "graph" in n.attrs)
    fn.attrs["graph"] = g  # the graph calls itself
    with pytest.raises(InlineError, match="recursive"):
        inline(g)


def test_argument_count_mismatch_is_refused():
    callee = add_relu_callee()
    g = Graph()
    x = g.add_input(T.Tensor, "x")
    fn = g.create("prim::Constant", output_types=[FN])
    fn.attrs["graph"] = callee
    g.block.append(fn)
    call = _node(g, "prim::CallFunction", None, [fn.output, x], [T.Tensor])
    g.add_output(call.output)
    with pytest.raises(InlineError, match="passes 1 arguments"):
        inline(g)
