"""variadic_cat_stack: cat/stack of a list built in the graph → prim::VarConcat/VarStack."""

import torch
from passes_helpers import assert_pass_preserves, check_scripted, ir, kinds, run_pass


def test_cat_and_stack_of_constructed_lists_become_variadic():
    g = ir("""
    graph(%x : Tensor, %y : Tensor, %d : int):
      %one : int = prim::Constant[value=1]()
      %l : Tensor[] = prim::ListConstruct(%x, %y)
      %c : Tensor = aten::cat(%l, %one)
      %m : Tensor[] = prim::ListConstruct(%x, %x, %y)
      %s : Tensor = aten::stack(%m, %d)
      %o : (Tensor, Tensor) = prim::TupleConstruct(%c, %s)
      return (%o)
    """)
    assert run_pass("variadic_cat_stack", g)
    assert kinds(g) == ["prim::VarConcat", "prim::VarStack", "prim::TupleConstruct"]
    cat, stack = g.nodes[-3], g.nodes[-2]
    assert [v.name for v in cat.inputs] == ["x", "y", "one"]
    assert [v.name for v in stack.inputs] == ["x", "x", "y", "d"]
    assert cat.output.name == "c" and stack.output.name == "s"


def test_mutated_input_or_shared_lists():
    g = ir("""
    graph(%x : Tensor, %y : Tensor, %xs : Tensor[]):
      %one : int = prim::Constant[value=1]()
      %l : Tensor[] = prim::ListConstruct(%x)
      %l2 : Tensor[] = aten::append.t(%l, %y)
      %c : Tensor = aten::cat(%l, %one)
      %d : Tensor = aten::cat(%xs, %one)
      %m : Tensor[] = prim::ListConstruct(%x, %y)
      %e : Tensor = aten::cat(%m, %one)
      %n : int = aten::len.t(%m)
      %o : (Tensor, Tensor, Tensor, int) = prim::TupleConstruct(%c, %d, %e, %n)
      return (%o)
    """)
    assert run_pass("variadic_cat_stack", g)
    # %l is appended to and %xs is not built here: both cats stay; %m is still read by len
    assert kinds(g) == ["prim::ListConstruct", "aten::append", "aten::cat", "aten::cat",
                        "prim::ListConstruct", "prim::VarConcat", "aten::len",
                        "prim::TupleConstruct"]


def test_element_writes_do_not_block_the_rewrite():
    g = ir("""
    graph(%x : Tensor):
      %one : int = prim::Constant[value=1]()
      %a : Tensor = aten::relu(%x)
      %l : Tensor[] = prim::ListConstruct(%a, %x)
      %w : Tensor = aten::mul_.Scalar(%a, %one)
      %c : Tensor = aten::cat(%l, %one)
      return (%c)
    """)
    assert run_pass("variadic_cat_stack", g)
    assert "prim::VarConcat" in kinds(g)


def test_results_preserved_on_ir():
    text = """
    graph(%x : Tensor, %y : Tensor):
      %zero : int = prim::Constant[value=0]()
      %two : int = prim::Constant[value=2]()
      %a : Tensor = aten::mul.Scalar(%x, %two)
      %l : Tensor[] = prim::ListConstruct(%a, %y, %x)
      %c : Tensor = aten::cat(%l, %zero)
      %w : Tensor = aten::mul_.Scalar(%a, %two)
      %m : Tensor[] = prim::ListConstruct(%a, %x)
      %s : Tensor = aten::stack(%m, %zero)
      %o : (Tensor, Tensor) = prim::TupleConstruct(%c, %s)
      return (%o)
    """
    after = assert_pass_preserves("variadic_cat_stack", text,
                                  (torch.randn(2, 3), torch.randn(4, 3)),
                                  (torch.randn(1, 2), torch.randn(1, 2)))
    assert "aten::cat" not in kinds(after) and "aten::stack" not in kinds(after)


def scripted_case(x: torch.Tensor, y: torch.Tensor, n: int):
    parts = [x, y * 2]
    grown = [x]
    for _ in range(n):
        grown.append(y)
    return torch.cat(parts, 0), torch.stack([x, x], 1), torch.cat(grown, 0)


def test_results_preserved_scripted():
    check_scripted(scripted_case, "variadic_cat_stack",
                   [torch.randn(2, 3), torch.randn(2, 3), 2],
                   [torch.randn(1, 5), torch.randn(1, 5), 0])
