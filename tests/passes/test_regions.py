"""``fuse_regions``: which nodes become a ``static_runtime::fused_region``, and what the
region node and its subgraph look like. (Compiling and running regions:
``tests/runtime/test_fused_regions.py``.)"""

from __future__ import annotations

import torch
from passes_helpers import ir, kinds, run_pass

from static_runtime.ir.graph import SUBGRAPH
from static_runtime.ir.parser import parse_graph
from static_runtime.ir.printer import print_graph
from static_runtime.ir.verifier import verify
from static_runtime.passes.regions import FUSED_REGION, MIN_KERNELS

REGION = FUSED_REGION


def regions(graph):
    return [n for n in graph.walk() if n.kind == REGION]


def sub_kinds(node):
    return [n.kind for n in node.attrs[SUBGRAPH].block.nodes if n.kind != "prim::Constant"]


CHAIN = """
graph(%x : Tensor, %y : Tensor):
  %a : Tensor = aten::mul.Tensor(%x, %y)
  %b : Tensor = aten::sigmoid(%a)
  %c : Tensor = aten::tanh(%b)
  %d : Tensor = aten::exp(%c)
  return (%d)
"""


def test_a_chain_of_pointwise_operators_becomes_one_region():
    g = ir(CHAIN)
    assert run_pass("fuse_regions", g)
    (r,) = regions(g)
    assert kinds(g) == [REGION]
    assert sub_kinds(r) == ["aten::mul", "aten::sigmoid", "aten::tanh", "aten::exp"]
    assert [v.name for v in r.inputs] == ["x", "y"] and r.outputs[0] is g.outputs[0]
    assert r.attrs["kernels"] == 4


def test_too_few_kernels_stay_as_they_are():
    assert MIN_KERNELS == 4
    g = ir("""
graph(%x : Tensor):
  %a : Tensor = aten::tanh(%x)
  %b : Tensor = aten::sigmoid(%a)
  %c : Tensor = aten::exp(%b)
  return (%c)
""")
    assert not run_pass("fuse_regions", g)
    assert kinds(g) == ["aten::tanh", "aten::sigmoid", "aten::exp"]


def test_the_region_prints_its_subgraph_and_parses_back():
    g = ir(CHAIN)
    run_pass("fuse_regions", g)
    text = print_graph(g)
    assert "subgraph(" in text and "static_runtime::fused_region[kernels=4]" in text
    again = parse_graph(text)
    verify(again)
    assert print_graph(again) == text
    (r,) = regions(again)
    assert sub_kinds(r) == ["aten::mul", "aten::sigmoid", "aten::tanh", "aten::exp"]


def test_a_node_reading_a_member_result_ends_the_region():
    # aten::size reads %b: the region before it holds mul, sigmoid (2 kernels: not enough);
    # after it, tanh, exp, neg form a region of their own.
    g = ir("""
graph(%x : Tensor):
  %0 : int = prim::Constant[value=0]()
  %a : Tensor = aten::neg(%x)
  %b : Tensor = aten::sigmoid(%a)
  %n : int = aten::size.int(%b, %0)
  %c : Tensor = aten::tanh(%b)
  %d : Tensor = aten::exp(%c)
  %e : Tensor = aten::neg(%d)
  %f : Tensor = aten::mul.Scalar(%e, %n)
  return (%f)
""")
    run_pass("fuse_regions", g)
    assert kinds(g) == ["aten::neg", "aten::sigmoid", "aten::size", REGION]
    (r,) = regions(g)
    assert sub_kinds(r) == ["aten::tanh", "aten::exp", "aten::neg", "aten::mul"]
    # the int read at run time is an input of the region
    assert [str(v.type) for v in r.inputs] == ["Tensor", "int"]


def test_a_write_between_members_ends_the_region():
    g = ir("""
graph(%x : Tensor, %y : Tensor):
  %a : Tensor = aten::neg(%x)
  %b : Tensor = aten::sigmoid(%a)
  %w : Tensor = aten::relu_(%y)
  %c : Tensor = aten::tanh(%y)
  %d : Tensor = aten::exp(%c)
  return (%b, %d, %w)
""")
    assert not run_pass("fuse_regions", g)


def test_views_are_members_inside_but_never_results():
    g = ir("""
graph(%x : Tensor):
  %0 : int = prim::Constant[value=0]()
  %1 : int = prim::Constant[value=1]()
  %a : Tensor = aten::neg(%x)
  %t : Tensor = aten::transpose.int(%a, %0, %1)
  %b : Tensor = aten::sigmoid(%t)
  %c0 : Tensor = aten::tanh(%b)
  %c : Tensor = aten::abs(%c0)
  %v : Tensor = aten::transpose.int(%c, %0, %1)
  return (%v)
""")
    run_pass("fuse_regions", g)
    (r,) = regions(g)
    assert sub_kinds(r) == ["aten::neg", "aten::transpose", "aten::sigmoid", "aten::tanh",
                            "aten::abs"]
    assert kinds(g) == [REGION, "aten::transpose"]


def test_a_view_taking_a_storage_offset_is_never_a_member():
    # Found by tools/opdb (as_strided.partial_views): as_strided addresses its input's
    # storage, compiled code the input's first element — on a view starting inside its
    # storage the fused region read other elements.
    g = ir("""
graph(%x : Tensor):
  %0 : int = prim::Constant[value=0]()
  %size : int[] = prim::Constant[value=[2, 2]]()
  %stride : int[] = prim::Constant[value=[1, 2]]()
  %s : Tensor = aten::as_strided(%x, %size, %stride, %0)
  %a : Tensor = aten::neg(%s)
  %b : Tensor = aten::sigmoid(%a)
  %c : Tensor = aten::tanh(%b)
  %d : Tensor = aten::abs(%c)
  return (%d)
""")
    run_pass("fuse_regions", g)
    (r,) = regions(g)
    assert "aten::as_strided" not in sub_kinds(r)
    assert kinds(g)[-2:] == ["aten::as_strided", REGION]


def test_regions_form_inside_loop_bodies_and_branches():
    g = ir("""
graph(%x : Tensor, %n : int, %c : bool):
  %t : bool = prim::Constant[value=1]()
  %h : Tensor = prim::Loop(%n, %t, %x)
    block0(%i : int, %h.1 : Tensor):
      %a : Tensor = aten::tanh(%h.1)
      %b : Tensor = aten::mul.Scalar(%a, %i)
      %d0 : Tensor = aten::sigmoid(%b)
      %d : Tensor = aten::neg(%d0)
      -> (%t, %d)
  %r : Tensor = prim::If(%c)
    block0():
      %e : Tensor = aten::exp(%h)
      %f : Tensor = aten::neg(%e)
      %g0 : Tensor = aten::abs(%f)
      %g : Tensor = aten::sin(%g0)
      -> (%g)
    block1():
      -> (%h)
  return (%r)
""")
    run_pass("fuse_regions", g)
    assert len(regions(g)) == 2
    loop_region = next(n for n in regions(g) if n.owning_block is not g.block)
    assert loop_region.owning_block.owning_node.kind in ("prim::Loop", "prim::If")


def test_numbers_need_an_overload_that_takes_a_tensor():
    # leaky_relu has no overload taking its slope as a tensor: with a slope known only at
    # run time it stays outside; with a constant slope it is a member.
    g = ir("""
graph(%x : Tensor, %s : float):
  %a : Tensor = aten::tanh(%x)
  %b : Tensor = aten::leaky_relu(%a, %s)
  %c : Tensor = aten::sigmoid(%b)
  %d : Tensor = aten::exp(%c)
  return (%d)
""")
    assert not run_pass("fuse_regions", g)
    g = ir("""
graph(%x : Tensor):
  %s : float = prim::Constant[value=0.1]()
  %a : Tensor = aten::tanh(%x)
  %b : Tensor = aten::leaky_relu(%a, %s)
  %c : Tensor = aten::sigmoid(%b)
  %d : Tensor = aten::exp(%c)
  return (%d)
""")
    assert run_pass("fuse_regions", g)


def test_random_and_data_dependent_operators_are_never_members():
    g = ir("""
graph(%x : Tensor):
  %a : Tensor = aten::tanh(%x)
  %b : Tensor = aten::bernoulli(%a, %0)
  %c : Tensor = aten::nonzero(%b)
  %d : Tensor = aten::sigmoid(%c)
  return (%d)
""".replace("%0)", "%none)").replace("graph(%x : Tensor):",
                                       "graph(%x : Tensor):\n  %none : NoneType = "
                                       "prim::Constant()"))
    assert not run_pass("fuse_regions", g)


def test_tensor_constants_are_inputs_not_part_of_the_subgraph():
    w = torch.randn(4)
    g = ir("""
graph(%x : Tensor):
  %w : Tensor = prim::Constant[value=<ref w>]()
  %a : Tensor = aten::mul.Tensor(%x, %w)
  %b : Tensor = aten::tanh(%a)
  %c0 : Tensor = aten::sigmoid(%b)
  %c : Tensor = aten::exp(%c0)
  return (%c)
""", {"w": w})
    run_pass("fuse_regions", g)
    (r,) = regions(g)
    assert r.inputs[1].node.kind == "prim::Constant"
    assert all(n.kind != "prim::Constant" or not isinstance(n.attrs.get("value"), torch.Tensor)
               for n in r.attrs[SUBGRAPH].block.nodes)
