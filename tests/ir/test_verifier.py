"""The IR verifier: a valid graph passes; each invariant, broken on purpose, is named."""

from __future__ import annotations

import pytest
import torch

from static_runtime.ir import types as T
from static_runtime.ir.graph import Graph, Node, Use
from static_runtime.ir.parser import parse_graph
from static_runtime.ir.verifier import IRVerificationError, verify

TEXT = """graph(%x : Tensor,
      %n : int,
      %flag : bool):
  %one : int = prim::Constant[value=1]()
  %true : bool = prim::Constant[value=True]()
  %sum : Tensor = aten::add.Tensor(%x, %x, %one)
  %r : Tensor = prim::If(%flag)
    block0():
      %inner : Tensor = aten::relu(%sum)
      -> (%inner)
    block1():
      -> (%x)
  %out : Tensor = prim::Loop(%n, %true, %r)
    block0(%i : int, %z : Tensor):
      %z2 : Tensor = aten::mul.Tensor(%z, %z)
      -> (%true, %z2)
  %last : Tensor = aten::relu(%out)
  return (%last)
"""


def graph() -> Graph:
    g = parse_graph(TEXT)
    verify(g)
    return g


def node(g: Graph, output_name: str) -> Node:
    (found,) = [n for n in g.walk() if any(v.name == output_name for v in n.outputs)]
    return found


def fails(g: Graph, *fragments: str) -> IRVerificationError:
    with pytest.raises(IRVerificationError) as info:
        verify(g)
    for fragment in fragments:
        assert fragment in str(info.value)
    return info.value


# ---------------------------------------------------------------------------- valid graphs


def test_valid_graphs_pass() -> None:
    verify(graph())
    verify(Graph())


def test_a_scripted_function_passes() -> None:
    frontend = pytest.importorskip("static_runtime.frontend.torchscript")

    def f(x: torch.Tensor, n: int) -> torch.Tensor:
        for i in range(n):
            if i % 2 == 0:
                x = x + i
        return x

    verify(frontend.import_graph(torch.jit.script(f).graph))


def test_error_is_a_value_error_and_carries_the_node() -> None:
    g = graph()
    bad = node(g, "last")
    bad.move_before(g.nodes[0])
    err = fails(g)
    assert isinstance(err, ValueError)
    assert err.node is bad


def test_message_shows_the_ir_around_the_bad_node() -> None:
    g = graph()
    node(g, "last").move_before(node(g, "sum"))
    err = fails(g, "%out is used by aten::relu (input 0) before it is defined (by prim::Loop)")
    lines = str(err).splitlines()
    marked = [line for line in lines if line.startswith(">> ")]
    assert marked == [">>   %last : Tensor = aten::relu(%out)"]
    assert any("%true : bool = prim::Constant" in line for line in lines)
    assert any("%sum : Tensor = aten::add.Tensor" in line for line in lines)


# ---------------------------------------------------------------------------- scope


def test_use_before_definition() -> None:
    g = graph()
    bad = g.create("aten::relu", [node(g, "sum").output], n_outputs=1)
    g.block.prepend(bad)
    fails(g, "%sum is used by aten::relu (input 0) before it is defined (by aten::add)")


def test_use_of_a_value_from_inside_an_if_block_after_the_if() -> None:
    g = graph()
    inner = node(g, "inner").output
    bad = g.create("aten::neg", [inner], n_outputs=1)
    bad.insert_after(node(g, "r"))
    fails(g, "%inner is used by aten::neg (input 0) outside the block that defines it")


def test_block_input_used_outside_its_block() -> None:
    g = graph()
    z = node(g, "z2").inputs[0]
    g.block.return_node.replace_input(0, z)
    fails(g, "%z is used by the graph's return outside the block that defines it",
          "an input of a block of prim::Loop")


def test_node_output_used_inside_its_own_block() -> None:
    g = graph()
    loop = node(g, "out")
    z2 = node(g, "z2")
    z2.replace_input(1, loop.output)
    fails(g, "%out is used by aten::mul (input 1) inside a block of the node that defines it")


def test_block_return_of_a_later_value() -> None:
    g = graph()
    then = node(g, "r").blocks[0]
    then.return_node.replace_input(0, node(g, "last").output)
    fails(g, "%last is used by a block return of prim::If before it is defined")


def test_use_of_a_value_not_in_the_graph() -> None:
    g = graph()
    stray = g.create("aten::zeros", [], n_outputs=1)  # never placed
    node(g, "last").replace_input(0, stray.output)
    fails(g, "is used by aten::relu (input 0) but is not defined in this graph")


def test_use_of_a_value_from_another_graph() -> None:
    g, other = graph(), graph()
    node(g, "last").replace_input(0, other.inputs[0])
    fails(g, "%x is used by aten::relu (input 0) but is not defined in this graph")


# ---------------------------------------------------------------------------- definitions


def test_value_defined_by_two_nodes() -> None:
    g = graph()
    node(g, "last").outputs.append(node(g, "sum").output)
    fails(g, "value %sum is defined twice: as an output of aten::add and as an output of "
             "aten::relu")


def test_value_records_the_wrong_defining_node() -> None:
    g = graph()
    node(g, "sum").output.offset = 3
    fails(g, "value %sum is an output of aten::add at offset 0, but records an output of "
             "aten::add at offset 3")


def test_two_values_with_one_name() -> None:
    g = graph()
    node(g, "last").output._name = "sum"  # bypasses Graph's name bookkeeping on purpose
    fails(g, "two values are named %sum (an output of aten::add and an output of aten::relu)")


# ---------------------------------------------------------------------------- use-lists


def test_use_missing_from_use_list() -> None:
    g = graph()
    node(g, "sum").output.uses.clear()
    fails(g, "the use-list of %sum lacks its use by aten::relu (input 0)")


def test_use_listed_twice() -> None:
    g = graph()
    last = node(g, "last")
    last.inputs[0].uses.append(Use(last, 0))
    fails(g, "the use-list of %out lists 2 times its use by aten::relu (input 0)")


def test_use_list_names_a_removed_node() -> None:
    g = graph()
    gone = g.create("aten::neg", [node(g, "sum").output], n_outputs=1)  # never placed
    assert gone.inputs[0].uses[-1].user is gone
    fails(g, "the use-list of %sum names a aten::neg node that is not in the graph")


def test_use_list_points_at_the_wrong_input() -> None:
    g = graph()
    add = node(g, "sum")
    one = node(g, "one").output
    one.uses.append(Use(add, 0))
    fails(g, "the use-list of %one says it is input 0 of aten::add, but that input is %x")


def test_use_list_points_past_the_inputs() -> None:
    g = graph()
    last = node(g, "last")
    node(g, "one").output.uses.append(Use(last, 5))
    fails(g, "says it is input 5 of aten::relu, but that input is no such input")


# ---------------------------------------------------------------------------- structure


def test_owning_block_disagrees_with_placement() -> None:
    g = graph()
    then = node(g, "r").blocks[0]
    node(g, "last").owning_block = then
    fails(g, "aten::relu: node.owning_block is not the block the node sits in")


def test_node_placed_twice() -> None:
    g = graph()
    last = node(g, "last")
    node(g, "r").blocks[1].nodes.append(last)
    fails(g, "aten::relu appears twice in the graph (in block1 of prim::If and in the "
             "top-level block)")


def test_param_node_in_a_node_list() -> None:
    g = graph()
    g.block.nodes.insert(0, g.block.param_node)
    fails(g, "prim::Param sits in a block's node list")


def test_block_owning_node_disagrees() -> None:
    g = graph()
    node(g, "r").blocks[0].owning_node = node(g, "out")
    fails(g, "a block of prim::If: block.owning_node is not the node that holds the block")


# ---------------------------------------------------------------------------- node forms


def test_if_needs_two_blocks() -> None:
    g = graph()
    node(g, "r").blocks.pop()
    fails(g, "prim::If needs 2 blocks, found 1")


def test_if_blocks_take_no_inputs() -> None:
    g = graph()
    node(g, "r").blocks[1].add_input(T.Int, "extra")
    fails(g, "block1 of prim::If has 1 inputs, expected none")


def test_if_block_outputs_match_node_outputs() -> None:
    g = graph()
    node(g, "r").blocks[0].add_output(node(g, "sum").output)
    fails(g, "block0 of prim::If returns 2 values, but the node has 1 outputs")


def test_if_condition_is_one_bool() -> None:
    g = graph()
    node(g, "r").replace_input(0, node(g, "one").output)
    fails(g, "prim::If needs exactly one bool input (the condition), found: int")
    g = graph()
    node(g, "r").add_input(g.inputs[2])
    fails(g, "prim::If needs exactly one bool input (the condition), found: bool, bool")


def test_loop_needs_trip_count_and_condition() -> None:
    g = graph()
    loop = node(g, "out")
    loop.set_inputs([g.inputs[1]])
    fails(g, "prim::Loop needs inputs (max_trip_count, initial_condition, *carried), "
             "found 1 inputs")


def test_loop_body_inputs() -> None:
    g = graph()
    node(g, "out").blocks[0].add_input(T.Int, "extra")
    fails(g, "the prim::Loop body has 3 inputs, expected 2 (the iteration number and 1 carried)")


def test_loop_body_outputs() -> None:
    g = graph()
    node(g, "out").blocks[0].remove_output(0)
    fails(g, "the prim::Loop body returns 1 values, expected 2 (the condition and 1 carried)")


def test_loop_outputs_match_carried_values() -> None:
    g = graph()
    node(g, "out").add_output(T.Tensor, "extra")
    fails(g, "prim::Loop has 2 outputs, expected 1 (one per carried value)")


def test_loop_has_one_block() -> None:
    g = graph()
    node(g, "out").add_block()
    fails(g, "prim::Loop needs 1 block, found 2")


def test_constant_has_no_inputs() -> None:
    g = graph()
    node(g, "one").add_input(g.inputs[1])
    err = fails(g, "prim::Constant has 1 inputs, expected none")
    assert ">>   %one : int = prim::Constant[value=1](%n)" in str(err)


def test_constant_has_one_output() -> None:
    g = graph()
    node(g, "one").add_output(T.Int, "two")
    fails(g, "prim::Constant has 2 outputs, expected one")
