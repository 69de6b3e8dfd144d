"""constant_propagation: fold what does not depend on the inputs, and only that."""

import torch
from passes_helpers import assert_pass_preserves, check_scripted, ir, kinds, only, run_pass

import static_runtime as sr
from static_runtime.ir import types as T
from static_runtime.ir.graph import Graph


def constants(g: Graph) -> dict:
    return {n.output.name: n.attrs.get("value") for n in g.walk() if n.kind == "prim::Constant"}


def returned_constant(g: Graph, index: int = 0):
    node = g.outputs[index].node
    assert node.kind == "prim::Constant", f"output {index} is computed by {node.kind}"
    return node.attrs.get("value")


def test_scalar_and_list_arithmetic_folds():
    g = ir("""
    graph(%x : Tensor):
      %two : int = prim::Constant[value=2]()
      %three : int = prim::Constant[value=3]()
      %a : int = aten::mul.int(%two, %three)
      %b : int = aten::add.int(%a, %two)
      %l : int[] = prim::ListConstruct(%a, %b)
      %y : Tensor = aten::sum.dim_IntList(%x, %l, %three)
      %t : (int, int) = prim::TupleConstruct(%a, %b)
      return (%y, %b, %t)
    """)
    assert run_pass("constant_propagation", g)
    assert returned_constant(g, 1) == 8
    assert returned_constant(g, 2) == (6, 8)
    assert kinds(g) == ["aten::sum"]
    assert g.outputs[0].node.inputs[1].node.attrs["value"] == [6, 8]


def test_small_tensor_folds_but_large_does_not():
    g = ir("""
    graph(%x : Tensor):
      %n : int = prim::Constant[value=4]()
      %big : int = prim::Constant[value=5000]()
      %none : NoneType = prim::Constant()
      %s : int[] = prim::ListConstruct(%n)
      %sb : int[] = prim::ListConstruct(%big)
      %a : Tensor = aten::ones(%s, %none, %none, %none, %none)
      %b : Tensor = aten::ones(%sb, %none, %none, %none, %none)
      %y : Tensor = aten::add.Tensor(%x, %a, %n)
      %z : Tensor = aten::sum(%b, %none)
      return (%y, %z)
    """)
    assert run_pass("constant_propagation", g)
    assert kinds(g) == ["aten::ones", "aten::add", "aten::sum"]
    folded = g.outputs[0].node.inputs[1].node
    assert folded.kind == "prim::Constant"
    torch.testing.assert_close(folded.attrs["value"], torch.ones(4))


def test_constant_branch_and_empty_loop_fold():
    g = ir("""
    graph(%x : Tensor):
      %true : bool = prim::Constant[value=True]()
      %zero : int = prim::Constant[value=0]()
      %two : int = prim::Constant[value=2]()
      %y : Tensor = prim::If(%true)
        block0():
          %a : Tensor = aten::mul.Scalar(%x, %two)
          -> (%a)
        block1():
          %b : Tensor = aten::neg(%x)
          -> (%b)
      %u : Tensor = prim::Loop(%zero, %true, %y)
        block0(%i : int, %u1 : Tensor):
          %u2 : Tensor = aten::mul.Scalar(%u1, %two)
          -> (%true, %u2)
      return (%u)
    """)
    assert run_pass("constant_propagation", g)
    assert kinds(g) == ["aten::mul"]
    assert g.outputs[0].node.kind == "aten::mul"


def test_static_types_decide_is_none_isinstance_and_shape_queries():
    g = ir("""
    graph(%x : Float(2, 3), %o : Tensor?, %n : NoneType):
      %none : NoneType = prim::Constant()
      %one : int = prim::Constant[value=1]()
      %a : bool = aten::__is__(%x, %none)
      %b : bool = aten::__isnot__(%x, %none)
      %c : bool = aten::__is__(%o, %none)
      %d : bool = aten::__is__(%n, %none)
      %e : bool = prim::isinstance[types=<ref tensor>](%x)
      %f : bool = prim::isinstance[types=<ref int>](%x)
      %g : int = aten::dim(%x)
      %h : int = aten::size.int(%x, %one)
      %k : int = prim::dtype(%x)
      return (%a, %b, %c, %d, %e, %f, %g, %h, %k)
    """, {"tensor": [T.Tensor], "int": [T.Int]})
    assert run_pass("constant_propagation", g)
    got = [g.outputs[i].node.attrs.get("value") if g.outputs[i].node.kind == "prim::Constant"
           else g.outputs[i].node.kind for i in range(9)]
    assert got == [False, True, "aten::__is__", True, True, False, 2, 3,
                   torch.ops.prim.dtype(torch.empty(0))]


def test_unknown_shapes_are_not_folded():
    g = ir("""
    graph(%x : Tensor, %y : Float(*, 3)):
      %zero : int = prim::Constant[value=0]()
      %one : int = prim::Constant[value=1]()
      %a : int = aten::dim(%x)
      %b : int = aten::size.int(%y, %zero)
      %c : int = aten::size.int(%y, %one)
      %d : int = prim::dtype(%x)
      return (%a, %b, %c, %d)
    """)
    run_pass("constant_propagation", g)
    assert [g.outputs[i].node.kind for i in range(4)] == [
        "aten::dim", "aten::size", "prim::Constant", "prim::dtype"]


def test_refuses_random_raising_written_and_escaping_results():
    g = ir("""
    graph(%x : Tensor):
      %n : int = prim::Constant[value=3]()
      %zero : int = prim::Constant[value=0]()
      %none : NoneType = prim::Constant()
      %s : int[] = prim::ListConstruct(%n)
      %r : Tensor = aten::rand(%s, %none, %none, %none, %none)
      %q : int = aten::floordiv.int(%n, %zero)
      %w : Tensor = aten::zeros(%s, %none, %none, %none, %none)
      %w2 : Tensor = aten::add_.Scalar(%w, %n, %n)
      %e : Tensor = aten::ones(%s, %none, %none, %none, %none)
      %y : Tensor = aten::add.Tensor(%x, %r, %n)
      %z : Tensor = aten::add.Tensor(%y, %w, %n)
      return (%z, %q, %e)
    """)
    run_pass("constant_propagation", g)
    assert kinds(g) == ["aten::rand", "aten::floordiv", "aten::zeros", "aten::add_",
                        "aten::ones", "aten::add", "aten::add"]


def test_folded_list_that_is_mutated_stays():
    g = ir("""
    graph(%x : Tensor):
      %n : int = prim::Constant[value=3]()
      %l : int[] = prim::ListConstruct(%n, %n)
      %l2 : int[] = aten::append.t(%l, %n)
      %y : Tensor = aten::sum.dim_IntList(%x, %l, %n)
      return (%y)
    """)
    run_pass("constant_propagation", g)
    assert "prim::ListConstruct" in kinds(g)


def test_reads_of_a_written_constant_stay():
    g = ir("""
    graph(%x : Tensor):
      %n : int = prim::Constant[value=3]()
      %l : int[] = prim::Constant[value=[1, 2]]()
      %l2 : int[] = aten::append.t(%l, %n)
      %k : int = aten::len.t(%l)
      return (%k)
    """)
    run_pass("constant_propagation", g)
    assert kinds(g) == ["aten::append", "aten::len"]


def test_results_preserved_on_ir():
    text = """
    graph(%x : Tensor, %c : bool):
      %two : int = prim::Constant[value=2]()
      %three : int = prim::Constant[value=3]()
      %false : bool = prim::Constant[value=False]()
      %k : int = aten::mul.int(%two, %three)
      %s : int[] = prim::ListConstruct(%two, %three)
      %t : Tensor = aten::ones(%s)
      %y : Tensor = prim::If(%false)
        block0():
          -> (%x)
        block1():
          %a : Tensor = aten::mul.Scalar(%x, %k)
          %b : Tensor = aten::add.Tensor(%a, %t, %two)
          -> (%b)
      return (%y)
    """
    after = assert_pass_preserves("constant_propagation", text,
                                  (torch.randn(2, 3), True), (torch.randn(1, 3), False))
    assert kinds(after) == ["aten::mul", "aten::add"]


def scripted_case(x: torch.Tensor, n: int):
    k = 3 * 2 + 1
    shape = [2, k]  # only read: becomes a constant list
    scale = torch.arange(4).float() * 0.5  # small and never written: folds
    if k > 5:
        y = x * k
    else:
        y = x - 1
    for _ in range(0):
        y = y + 100
    z = torch.zeros(shape)
    z.add_(1.0)  # written: must not become a shared constant
    sizes = [2, k]  # returned: the caller may change it
    return y + n, z, sizes, scale.sum() + x.sum()


def test_results_preserved_scripted():
    check_scripted(scripted_case, "constant_propagation", [torch.randn(3), 2],
                   [torch.randn(5), -1])
    prepared = sr.StaticModule(torch.jit.script(scripted_case),
                               options=only("constant_propagation"))
    found = kinds(prepared.graph)
    assert "aten::arange" not in found and found.count("aten::sum") == 1
    assert "aten::zeros" in found and found.count("prim::ListConstruct") == 1


def test_new_constants_are_placed_in_scope():
    g = Graph()
    x = g.add_input(T.Tensor, "x")
    # a foldable node nested in a branch: its constant must live in the branch
    c = g.add_input(T.Bool, "c")
    branch = g.create("prim::If", [c], output_types=[T.Int])
    g.block.append(branch)
    yes, no = branch.add_block(), branch.add_block()
    two = g.constant(2, T.Int)
    mul = g.create("aten::mul", [two, two], output_types=[T.Int])
    mul.schema = "aten::mul.int(int a, int b) -> int"
    yes.append(mul)
    yes.add_output(mul.output)
    no.add_output(two)
    g.add_output(branch.output)
    g.add_output(x)
    assert run_pass("constant_propagation", g)
    assert yes.outputs[0].node.owning_block is yes
    assert yes.outputs[0].node.attrs["value"] == 4
