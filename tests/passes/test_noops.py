"""remove_noops: detach, eval-mode dropout and unobservable list copies go; nothing else."""

import torch
from passes_helpers import assert_pass_preserves, check_scripted, ir, kinds, only, run_pass

import static_runtime as sr


def test_detach_and_eval_dropout_are_removed():
    g = ir("""
    graph(%x : Tensor):
      %p : float = prim::Constant[value=0.5]()
      %false : bool = prim::Constant[value=False]()
      %a : Tensor = aten::relu(%x)
      %d : Tensor = aten::detach(%a)
      %e : Tensor = aten::dropout(%d, %p, %false)
      %f : Tensor = aten::feature_dropout(%e, %p, %false)
      %g : Tensor = aten::dropout_(%f, %p, %false)
      %y : Tensor = aten::sigmoid(%g)
      return (%y)
    """)
    assert run_pass("remove_noops", g)
    assert kinds(g) == ["aten::relu", "aten::sigmoid"]
    assert g.outputs[0].node.inputs[0].node.kind == "aten::relu"


def test_train_mode_unknown_mode_and_contiguous_stay():
    g = ir("""
    graph(%x : Tensor, %train : bool):
      %p : float = prim::Constant[value=0.5]()
      %true : bool = prim::Constant[value=True]()
      %zero : int = prim::Constant[value=0]()
      %a : Tensor = aten::dropout(%x, %p, %true)
      %b : Tensor = aten::dropout(%a, %p, %train)
      %c : Tensor = aten::contiguous(%b, %zero)
      return (%c)
    """)
    assert not run_pass("remove_noops", g)
    assert kinds(g) == ["aten::dropout", "aten::dropout", "aten::contiguous"]


def test_written_detach_or_dropout_stays():
    # Removing these would make relu_ write the graph input %x.
    g = ir("""
    graph(%x : Tensor):
      %p : float = prim::Constant[value=0.5]()
      %false : bool = prim::Constant[value=False]()
      %d : Tensor = aten::detach(%x)
      %d2 : Tensor = aten::relu_(%d)
      %e : Tensor = aten::dropout(%x, %p, %false)
      %e2 : Tensor = aten::sigmoid_(%e)
      %y : Tensor = aten::add.Tensor(%d2, %e2, %p)
      return (%y)
    """)
    assert not run_pass("remove_noops", g)
    assert kinds(g) == ["aten::detach", "aten::relu_", "aten::dropout", "aten::sigmoid_",
                        "aten::add"]


def test_list_copy_removed_only_when_unobservable():
    g = ir("""
    graph(%x : Tensor, %y : Tensor):
      %none : NoneType = prim::Constant()
      %one : int = prim::Constant[value=1]()
      %zero : int = prim::Constant[value=0]()
      %l : Tensor[] = prim::ListConstruct(%x, %y)
      %c1 : Tensor[] = aten::slice.t(%l, %none, %none, %one)
      %c2 : Tensor[] = aten::list.t(%l)
      %c3 : Tensor[] = aten::slice.t(%l, %zero, %none, %one)
      %c4 : Tensor[] = aten::slice.t(%l, %one, %none, %one)
      %r : Tensor = aten::cat(%c1, %zero)
      %s : Tensor = aten::cat(%c2, %zero)
      %t : Tensor = aten::cat(%c4, %zero)
      %m : Tensor[] = aten::list.t(%l)
      %m2 : Tensor[] = aten::append.t(%m, %x)
      %u : Tensor = aten::cat(%m, %zero)
      %o : (Tensor, Tensor, Tensor, Tensor, Tensor[]) = prim::TupleConstruct(%r, %s, %t, %u, %c3)
      return (%o)
    """)
    assert run_pass("remove_noops", g)
    # c1, c2: gone; c3 is returned (the caller could tell the lists apart); c4 is a real
    # slice; m is appended to, which must not append to l
    assert kinds(g).count("aten::slice") == 2
    assert kinds(g).count("aten::list") == 1
    assert g.outputs[0].node.inputs[0].node.inputs[0].node.kind == "prim::ListConstruct"


def test_copy_of_a_list_mutated_later_stays():
    g = ir("""
    graph(%x : Tensor, %y : Tensor):
      %zero : int = prim::Constant[value=0]()
      %l : Tensor[] = prim::ListConstruct(%x)
      %c : Tensor[] = aten::list.t(%l)
      %l2 : Tensor[] = aten::append.t(%l, %y)
      %r : Tensor = aten::cat(%c, %zero)
      %s : Tensor = aten::cat(%l, %zero)
      %o : (Tensor, Tensor) = prim::TupleConstruct(%r, %s)
      return (%o)
    """)
    assert not run_pass("remove_noops", g)


def test_results_preserved_on_ir():
    text = """
    graph(%x : Tensor, %y : Tensor):
      %p : float = prim::Constant[value=0.5]()
      %false : bool = prim::Constant[value=False]()
      %zero : int = prim::Constant[value=0]()
      %none : NoneType = prim::Constant()
      %one : int = prim::Constant[value=1]()
      %a : Tensor = aten::detach(%x)
      %b : Tensor = aten::dropout(%a, %p, %false)
      %l : Tensor[] = prim::ListConstruct(%b, %y)
      %c : Tensor[] = aten::slice.t(%l, %none, %none, %one)
      %r : Tensor = aten::cat(%c, %zero)
      return (%r)
    """
    after = assert_pass_preserves("remove_noops", text, (torch.randn(2, 3), torch.randn(1, 3)))
    assert kinds(after) == ["prim::ListConstruct", "aten::cat"]


def scripted_case(x: torch.Tensor, y: torch.Tensor):
    a = torch.nn.functional.dropout(x.detach(), 0.3, False)
    lst = [a, y]
    copy = lst[:]
    mutated = list(lst)
    mutated.append(x)  # a copy that is changed: stays a copy
    z = y * 1
    d = z.detach()
    d.relu_()  # writes z through the detached alias: that detach stays
    return torch.cat(copy, 0), torch.cat(mutated, 0), z, len(lst)


def test_results_preserved_scripted():
    check_scripted(scripted_case, "remove_noops", [torch.randn(2, 3), torch.randn(2, 3)],
                   [torch.randn(1, 4), torch.randn(3, 4)])
    prepared = sr.StaticModule(torch.jit.script(scripted_case), options=only("remove_noops"))
    found = kinds(prepared.graph)
    assert "aten::slice" not in found and found.count("aten::list") == 1
    assert found.count("aten::detach") == 1 and "aten::dropout" not in found
