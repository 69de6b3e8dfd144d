"""specialize_alpha: add/sub with the int constant alpha=1 → static_runtime::add/sub."""

import torch
from passes_helpers import assert_pass_preserves, check_scripted, ir, kinds, run_pass

from static_runtime.ir.parser import parse_graph
from static_runtime.ir.printer import print_graph_with_constants
from static_runtime.ops.registry import Tier, select


def test_alpha_one_is_dropped():
    g = ir("""
    graph(%x : Tensor, %y : Tensor):
      %one : int = prim::Constant[value=1]()
      %three : float = prim::Constant[value=3.0]()
      %a : Tensor = aten::add.Tensor(%x, %y, %one)
      %b : Tensor = aten::sub.Tensor(%a, %y, %one)
      %c : Tensor = aten::add.Scalar(%b, %three, %one)
      %d : Tensor = aten::sub.Scalar(%c, %three, %one)
      return (%d)
    """)
    assert run_pass("specialize_alpha", g)
    assert kinds(g) == ["static_runtime::add", "static_runtime::sub", "static_runtime::add",
                        "static_runtime::sub"]
    assert all(len(n.inputs) == 2 for n in g.nodes if n.kind != "prim::Constant")
    assert g.nodes[-1].schema == \
        "static_runtime::sub.Scalar(Tensor self, Scalar other) -> Tensor"
    assert [n.output.name for n in g.nodes[-4:]] == ["a", "b", "c", "d"]
    impl = select(g.nodes[-4])
    assert impl.tier is Tier.OUT


def test_other_alphas_and_overloads_stay():
    g = ir("""
    graph(%x : Tensor, %y : Tensor, %k : int, %l : int[]):
      %one : int = prim::Constant[value=1]()
      %two : int = prim::Constant[value=2]()
      %fone : float = prim::Constant[value=1.0]()
      %a : Tensor = aten::add.Tensor(%x, %y, %two)
      %b : Tensor = aten::add.Tensor(%a, %y, %fone)
      %c : Tensor = aten::sub.Tensor(%b, %y, %k)
      %n : int = aten::add.int(%k, %one)
      %m : int[] = aten::add.t(%l, %l)
      %o : (Tensor, int, int[]) = prim::TupleConstruct(%c, %n, %m)
      return (%o)
    """)
    assert not run_pass("specialize_alpha", g)


def test_specialised_graph_prints_and_parses_back():
    g = ir("""
    graph(%x : Tensor, %y : Tensor):
      %one : int = prim::Constant[value=1]()
      %a : Tensor = aten::add.Tensor(%x, %y, %one)
      return (%a)
    """)
    run_pass("specialize_alpha", g)
    text, constants = print_graph_with_constants(g)
    assert "static_runtime::add.Tensor(%x, %y)" in text
    back = parse_graph(text, constants)
    node = back.nodes[-1]
    assert node.kind == "static_runtime::add" and node.schema == g.nodes[-1].schema


def test_results_preserved_on_ir():
    text = """
    graph(%x : Tensor, %y : Tensor):
      %one : int = prim::Constant[value=1]()
      %half : Scalar = prim::Constant[value=0.5]()
      %a : Tensor = aten::add.Tensor(%x, %y, %one)
      %b : Tensor = aten::sub.Scalar(%a, %half, %one)
      %c : Tensor = aten::sub.Tensor(%b, %x, %one)
      %d : Tensor = aten::add.Scalar(%c, %one, %one)
      return (%d)
    """
    for dtype in (torch.float32, torch.float64):
        assert_pass_preserves("specialize_alpha", text,
                              (torch.randn(3, dtype=dtype), torch.randn(2, 1)))
    # integer tensors: the dtype stays integral where it was, and promotes where it did
    assert_pass_preserves("specialize_alpha", text.replace("value=0.5", "value=2"),
                          (torch.arange(6), torch.arange(6, dtype=torch.int32)))
    assert_pass_preserves("specialize_alpha", text,
                          (torch.arange(6), torch.arange(6, dtype=torch.int32)))


def scripted_case(x: torch.Tensor, y: torch.Tensor):
    a = x + y
    b = a - 2
    c = torch.add(b, y, alpha=3)
    d = torch.sub(c, x, alpha=1)
    return d + 1.5


def test_results_preserved_scripted():
    check_scripted(scripted_case, "specialize_alpha", [torch.randn(2, 3), torch.randn(3)],
                   [torch.arange(4), torch.arange(4)])
