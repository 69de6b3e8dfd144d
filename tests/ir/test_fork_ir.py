"""``prim::fork`` in the IR: a node owning one block (the forked function); printed, parsed
back and verified like any other block."""

from __future__ import annotations

import pytest
import torch

import static_runtime as sr
from static_runtime.frontend.torchscript import import_torchscript
from static_runtime.ir.parser import parse_graph
from static_runtime.ir.printer import print_graph, print_graph_with_constants
from static_runtime.ir.verifier import IRVerificationError, verify


def leaf(x: torch.Tensor) -> torch.Tensor:
    return torch.exp(-x)


def middle(x: torch.Tensor) -> torch.Tensor:
    a = torch.jit.fork(leaf, x)
    b = torch.jit.fork(leaf, x + 1)
    return torch.jit.wait(a) + torch.jit.wait(b)


def forks_of_forks(x: torch.Tensor) -> torch.Tensor:
    fut = torch.jit.fork(middle, x)
    return torch.jit.wait(fut)


def test_import_makes_the_subgraph_the_forks_block_with_calls_inlined():
    graph = import_torchscript(torch.jit.script(forks_of_forks))
    verify(graph)
    forks = [n for n in graph.walk() if n.kind == "prim::fork"]
    assert len(forks) == 3  # the outer fork and the two inside its block
    for node in forks:
        body = node.blocks[0]
        assert len(body.inputs) == len(node.inputs) and len(body.outputs) == 1
    # TorchScript's inliner leaves calls inside fork subgraphs; the importer inlines them.
    assert not any(n.kind == "prim::CallFunction" for n in graph.walk())


@pytest.mark.parametrize("prepared", [False, True], ids=["imported", "prepared"])
def test_fork_round_trips_through_the_text_form(prepared):
    scripted = torch.jit.script(forks_of_forks)
    graph = sr.StaticModule(scripted).graph if prepared else import_torchscript(scripted)
    text, constants = print_graph_with_constants(graph)
    assert "prim::fork" in text and "block0(" in text
    again = parse_graph(text, constants)
    verify(again)
    assert print_graph(again, dict(constants)) == text


def test_verifier_refuses_a_fork_block_using_an_outer_value():
    text = """graph(%x : Tensor):
  %y : Tensor = aten::relu(%x)
  %f : Future(Tensor) = prim::fork(%x)
    block0(%a : Tensor):
      %z : Tensor = aten::mul.Tensor(%a, %y)
      -> (%z)
  %w : Tensor = aten::wait(%f)
  return (%w)
"""
    with pytest.raises(IRVerificationError, match="inside a prim::fork block but defined "
                                                  "outside it"):
        verify(parse_graph(text))


def test_verifier_accepts_outer_constants_in_a_fork_block():
    text = """graph(%x : Tensor):
  %c : int = prim::Constant[value=2]()
  %f : Future(Tensor) = prim::fork(%x)
    block0(%a : Tensor):
      %z : Tensor = aten::mul.Scalar(%a, %c)
      -> (%z)
  %w : Tensor = aten::wait(%f)
  return (%w)
"""
    verify(parse_graph(text))


@pytest.mark.parametrize("text,message", [
    ("""graph(%x : Tensor):
  %f : Future(Tensor) = prim::fork(%x)
    block0(%a : Tensor, %b : Tensor):
      -> (%a)
  %w : Tensor = aten::wait(%f)
  return (%w)
""", "block has 2 inputs, but the node passes 1"),
    ("""graph(%x : Tensor):
  %f : Future(Tensor) = prim::fork(%x)
    block0(%a : Tensor):
      -> (%a, %a)
  %w : Tensor = aten::wait(%f)
  return (%w)
""", "returns 2 values, expected one"),
    ("""graph(%x : Tensor):
  %f : Tensor = prim::fork(%x)
    block0(%a : Tensor):
      -> (%a)
  return (%f)
""", "needs one Future output"),
])
def test_verifier_refuses_malformed_forks(text, message):
    with pytest.raises(IRVerificationError, match=message):
        verify(parse_graph(text))
