"""eliminate_dead_code: remove what cannot affect outputs or the world, keep the rest."""

import torch
from passes_helpers import assert_pass_preserves, check_scripted, ir, kinds, run_pass


def test_unused_pure_nodes_go():
    g = ir("""
    graph(%x : Tensor):
      %two : int = prim::Constant[value=2]()
      %unused : int = prim::Constant[value=7]()
      %a : Tensor = aten::relu(%x)
      %b : Tensor = aten::mul.Scalar(%a, %two)
      %c : Tensor = aten::sigmoid(%x)
      %l : Tensor[] = prim::ListConstruct(%c, %a)
      return (%a)
    """)
    assert run_pass("eliminate_dead_code", g)
    assert kinds(g, constants=True) == ["aten::relu"]
    assert not run_pass("eliminate_dead_code", g)


def test_effects_and_live_writes_stay():
    g = ir("""
    graph(%x : Tensor, %c : bool):
      %two : int = prim::Constant[value=2]()
      %msg : str = prim::Constant[value="boom"]()
      %none : NoneType = prim::Constant()
      %a : Tensor = aten::relu(%x)
      %w : Tensor = aten::mul_.Scalar(%a, %two)
      %i : Tensor = aten::add_.Scalar(%x, %two, %two)
       = prim::If(%c)
        block0():
           = prim::RaiseException(%msg, %none)
          -> ()
        block1():
          -> ()
       = prim::Print(%msg)
      %s : int[] = prim::ListConstruct(%two)
      %r : Tensor = aten::rand(%s, %none, %none, %none, %none)
      %d : Tensor = aten::sigmoid(%x)
      %dw : Tensor = aten::mul_.Scalar(%d, %two)
      return (%a)
    """)
    assert run_pass("eliminate_dead_code", g)
    # the write to the returned %a, the write to the input %x, the raise, the print and the
    # random draw (later random results depend on it) stay; the write to dead %d goes
    assert kinds(g) == ["aten::relu", "aten::mul_", "aten::add_", "prim::If",
                        "prim::RaiseException", "prim::Print", "prim::ListConstruct",
                        "aten::rand"]


def test_unused_if_outputs_and_loop_carried_values_go():
    g = ir("""
    graph(%x : Tensor, %c : bool, %n : int):
      %true : bool = prim::Constant[value=True]()
      %two : int = prim::Constant[value=2]()
      %a : Tensor, %b : Tensor = prim::If(%c)
        block0():
          %a1 : Tensor = aten::relu(%x)
          %b1 : Tensor = aten::sigmoid(%x)
          -> (%a1, %b1)
        block1():
          -> (%x, %x)
      %u : Tensor, %v : Tensor, %k : Tensor = prim::Loop(%n, %true, %a, %a, %x)
        block0(%i : int, %u1 : Tensor, %v1 : Tensor, %k1 : Tensor):
          %u2 : Tensor = aten::mul.Scalar(%u1, %two)
          %v2 : Tensor = aten::add.Tensor(%v1, %k1, %two)
          -> (%true, %u2, %v2, %k1)
      return (%u)
    """)
    assert run_pass("eliminate_dead_code", g)
    if_node = g.outputs[0].node.inputs[2].node
    assert if_node.kind == "prim::If" and len(if_node.outputs) == 1
    assert kinds(g) == ["prim::If", "aten::relu", "prim::Loop", "aten::mul"]
    loop = g.outputs[0].node
    assert len(loop.outputs) == 1 and len(loop.blocks[0].inputs) == 2


def test_carried_value_read_in_the_body_stays():
    g = ir("""
    graph(%x : Tensor, %n : int):
      %true : bool = prim::Constant[value=True]()
      %two : int = prim::Constant[value=2]()
      %u : Tensor, %acc : Tensor = prim::Loop(%n, %true, %x, %x)
        block0(%i : int, %u1 : Tensor, %acc1 : Tensor):
          %acc2 : Tensor = aten::mul.Scalar(%acc1, %two)
          %u2 : Tensor = aten::add.Tensor(%u1, %acc2, %two)
          -> (%true, %u2, %acc2)
      return (%u)
    """)
    run_pass("eliminate_dead_code", g)
    assert len(g.outputs[0].node.outputs) == 2


def test_results_preserved_on_ir():
    text = """
    graph(%x : Tensor, %n : int):
      %true : bool = prim::Constant[value=True]()
      %two : int = prim::Constant[value=2]()
      %dead : Tensor = aten::exp(%x)
      %u : Tensor, %v : Tensor = prim::Loop(%n, %true, %x, %x)
        block0(%i : int, %u1 : Tensor, %v1 : Tensor):
          %u2 : Tensor = aten::mul.Scalar(%u1, %two)
          %v2 : Tensor = aten::neg(%v1)
          -> (%true, %u2, %v2)
      return (%u)
    """
    after = assert_pass_preserves("eliminate_dead_code", text, (torch.randn(3), 3),
                                  (torch.randn(2, 2), 0))
    assert "aten::exp" not in kinds(after) and "aten::neg" not in kinds(after)


def scripted_case(x: torch.Tensor, n: int):
    unused = torch.exp(x)  # noqa: F841
    acc = x
    dead = x
    for _ in range(n):
        acc = acc * 2
        dead = dead + 1
    y = torch.relu(x)
    y.add_(1)
    return acc + y


def test_results_preserved_scripted():
    check_scripted(scripted_case, "eliminate_dead_code", [torch.randn(3), 3],
                   [torch.randn(2, 5), 0])
