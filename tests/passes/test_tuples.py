"""merge_tuple_unpacks: forward constructed tuples/lists, merge consecutive unpacks."""

import torch
from passes_helpers import assert_pass_preserves, check_scripted, ir, kinds, run_pass


def test_unpack_and_index_of_a_construct_read_the_values_directly():
    g = ir("""
    graph(%x : Tensor, %y : Tensor):
      %one : int = prim::Constant[value=1]()
      %neg : int = prim::Constant[value=-2]()
      %t : (Tensor, Tensor) = prim::TupleConstruct(%x, %y)
      %a : Tensor, %b : Tensor = prim::TupleUnpack(%t)
      %i : Tensor = prim::TupleIndex(%t, %neg)
      %l : Tensor[] = prim::ListConstruct(%x, %y)
      %c : Tensor, %d : Tensor = prim::ListUnpack(%l)
      %s : Tensor = aten::add.Tensor(%a, %d, %one)
      %u : Tensor = aten::add.Tensor(%b, %i, %one)
      %v : Tensor = aten::add.Tensor(%c, %s, %one)
      return (%u, %v)
    """)
    assert run_pass("merge_tuple_unpacks", g)
    assert kinds(g) == ["aten::add", "aten::add", "aten::add"]
    s, u, v = g.nodes[-3:]
    assert [x.name for x in s.inputs[:2]] == ["x", "y"]
    assert [x.name for x in u.inputs[:2]] == ["y", "x"]
    assert [x.name for x in v.inputs[:2]] == ["x", "s"]


def test_consecutive_unpacks_merge():
    g = ir("""
    graph(%t1 : (Tensor, Tensor), %t2 : (Tensor, int), %t3 : ((Tensor, Tensor), Tensor)):
      %a : Tensor, %b : Tensor = prim::TupleUnpack(%t1)
      %c : Tensor, %n : int = prim::TupleUnpack(%t2)
      %p : (Tensor, Tensor), %e : Tensor = prim::TupleUnpack(%t3)
      %f : Tensor, %h : Tensor = prim::TupleUnpack(%p)
      %l : Tensor[] = prim::ListConstruct(%a, %b, %c, %e, %f, %h)
      %r : Tensor = aten::cat(%l, %n)
      return (%r)
    """)
    assert run_pass("merge_tuple_unpacks", g)
    # the last unpack reads an output of the third, so it starts a new run of one
    assert kinds(g) == ["prim::VarTupleUnpack", "prim::TupleUnpack", "prim::ListConstruct",
                        "aten::cat"]
    merged = g.nodes[0]
    assert [v.name for v in merged.inputs] == ["t1", "t2", "t3"]
    assert [v.name for v in merged.outputs] == ["a", "b", "c", "n", "p", "e"]


def test_mutated_list_and_length_mismatch_are_left_alone():
    g = ir("""
    graph(%x : Tensor, %y : Tensor):
      %l : Tensor[] = prim::ListConstruct(%x)
      %l2 : Tensor[] = aten::append.t(%l, %y)
      %a : Tensor, %b : Tensor = prim::ListUnpack(%l)
      %m : Tensor[] = prim::ListConstruct(%x)
      %c : Tensor, %d : Tensor = prim::ListUnpack(%m)
      %o : (Tensor, Tensor, Tensor, Tensor) = prim::TupleConstruct(%a, %b, %c, %d)
      return (%o)
    """)
    assert not run_pass("merge_tuple_unpacks", g)


def test_results_preserved_on_ir():
    text = """
    graph(%t1 : (Tensor, Tensor), %t2 : (Tensor, int), %x : Tensor):
      %one : int = prim::Constant[value=1]()
      %a : Tensor, %b : Tensor = prim::TupleUnpack(%t1)
      %c : Tensor, %n : int = prim::TupleUnpack(%t2)
      %t : (Tensor, Tensor) = prim::TupleConstruct(%a, %x)
      %p : Tensor, %q : Tensor = prim::TupleUnpack(%t)
      %s : Tensor = aten::add.Tensor(%b, %c, %n)
      %u : Tensor = aten::sub.Tensor(%q, %p, %one)
      %o : (Tensor, Tensor) = prim::TupleConstruct(%s, %u)
      return (%o)
    """
    args = ((torch.randn(3), torch.randn(3)), (torch.randn(3), 2), torch.randn(3))
    after = assert_pass_preserves("merge_tuple_unpacks", text, args)
    assert kinds(after).count("prim::VarTupleUnpack") == 1
    assert "prim::TupleUnpack" not in kinds(after)


def scripted_case(pair: tuple[torch.Tensor, torch.Tensor], other: tuple[torch.Tensor, int]):
    a, b = pair
    c, n = other
    t = (a * n, b)
    p, q = t
    lst = [p, c]
    u, v = lst
    return p + q + u - v, t[1]


def test_results_preserved_scripted():
    check_scripted(scripted_case, "merge_tuple_unpacks",
                   [(torch.randn(2), torch.randn(2)), (torch.randn(2), 3)],
                   [(torch.randn(4, 1), torch.randn(4, 1)), (torch.randn(4, 1), -1)])
