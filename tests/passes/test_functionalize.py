"""functionalize: in-place ops on fresh, unshared tensors → their functional forms."""

import pytest
import torch
from passes_helpers import assert_pass_preserves, check_scripted, ir, kinds, only, run_pass

import static_runtime as sr
from static_runtime.passes.functionalize import functional_schema


def test_functional_twins_are_found_by_schema():
    assert functional_schema("aten::relu_(Tensor(a!) self) -> Tensor(a!)") == \
        "aten::relu(Tensor self) -> Tensor"
    assert functional_schema(
        "aten::add_.Tensor(Tensor(a!) self, Tensor other, *, Scalar alpha=1) -> Tensor(a!)") \
        == "aten::add.Tensor(Tensor self, Tensor other, *, Scalar alpha=1) -> Tensor"
    # a list op, an out variant, a functional op: none has a twin
    assert functional_schema("aten::add_.t(t[](a!) self, t[] b) -> t[]") is None
    assert functional_schema(
        "aten::relu.out(Tensor self, *, Tensor(a!) out) -> Tensor(a!)") is None
    assert functional_schema("aten::relu(Tensor self) -> Tensor") is None


def test_in_place_chain_on_a_fresh_tensor_becomes_functional():
    g = ir("""
    graph(%x : Tensor):
      %two : int = prim::Constant[value=2]()
      %a : Tensor = aten::mul.Scalar(%x, %two)
      %b : Tensor = aten::add_.Scalar(%a, %two, %two)
      %c : Tensor = aten::relu_(%a)
      %d : Tensor = aten::sigmoid(%a)
      %e : Tensor = aten::neg(%b)
      %s : Tensor = aten::add.Tensor(%d, %e, %two)
      return (%s)
    """)
    assert run_pass("functionalize", g)
    assert kinds(g) == ["aten::mul", "aten::add", "aten::relu", "aten::sigmoid", "aten::neg",
                        "aten::add"]
    add, relu, sigmoid, neg = g.nodes[-5:-1]
    assert relu.inputs[0] is add.output
    # every later reader sees the last written value
    assert sigmoid.inputs[0] is relu.output and neg.inputs[0] is relu.output
    assert relu.schema == "aten::relu(Tensor self) -> Tensor"


def test_readers_before_the_write_keep_the_old_value():
    text = """
    graph(%x : Tensor):
      %two : int = prim::Constant[value=2]()
      %a : Tensor = aten::mul.Scalar(%x, %two)
      %before : Tensor = aten::neg(%a)
      %w : Tensor = aten::relu_(%a)
      %after : Tensor = aten::neg(%a)
      %s : Tensor = aten::add.Tensor(%before, %after, %two)
      return (%s)
    """
    after = assert_pass_preserves("functionalize", text, (torch.randn(5),), (torch.randn(2, 2),))
    assert kinds(after) == ["aten::mul", "aten::neg", "aten::relu", "aten::neg", "aten::add"]
    neg_before = after.nodes[-4]
    assert neg_before.inputs[0].node.kind == "aten::mul"


UNSAFE = {
    "graph input": """
      %w : Tensor = aten::relu_(%x)
      %r : Tensor = aten::neg(%x)""",
    "has a view": """
      %a : Tensor = aten::mul.Scalar(%x, %two)
      %v : Tensor = aten::select.int(%a, %zero, %zero)
      %w : Tensor = aten::relu_(%a)
      %r : Tensor = aten::neg(%v)""",
    "held by a list": """
      %a : Tensor = aten::mul.Scalar(%x, %two)
      %l : Tensor[] = prim::ListConstruct(%a)
      %w : Tensor = aten::relu_(%a)
      %r : Tensor = aten::cat(%l, %zero)""",
    "returned": """
      %r : Tensor = aten::mul.Scalar(%x, %two)
      %w : Tensor = aten::relu_(%r)""",
    "written in a nested block": """
      %r : Tensor = aten::mul.Scalar(%x, %two)
       = prim::If(%c)
        block0():
          %w : Tensor = aten::relu_(%r)
          -> ()
        block1():
          -> ()
      %n : Tensor = aten::neg(%r)""",
    "other tensor of unknown dtype": """
      %a : Tensor = aten::mul.Scalar(%x, %two)
      %w : Tensor = aten::add_.Tensor(%a, %x, %two)
      %r : Tensor = aten::neg(%a)""",
    "random": """
      %a : Tensor = aten::mul.Scalar(%x, %two)
      %w : Tensor = aten::bernoulli_.float(%a, %half)
      %r : Tensor = aten::neg(%a)""",
}


@pytest.mark.parametrize("case", list(UNSAFE))
def test_unsafe_writes_stay_in_place(case):
    g = ir(f"""
    graph(%x : Tensor, %c : bool):
      %zero : int = prim::Constant[value=0]()
      %two : int = prim::Constant[value=2]()
      %half : float = prim::Constant[value=0.5]()
      {UNSAFE[case].strip()}
      return (%r)
    """)
    assert not run_pass("functionalize", g)


def test_other_tensor_arguments_need_equal_known_dtypes():
    g = ir("""
    graph(%x : Float(*, 3), %y : Float(*, 3)):
      %two : int = prim::Constant[value=2]()
      %f : Float(*, 3) = aten::mul.Scalar(%x, %two)
      %fw : Tensor = aten::add_.Tensor(%f, %y, %two)
      %r : Tensor = aten::neg(%f)
      return (%r)
    """)
    assert run_pass("functionalize", g)
    assert kinds(g) == ["aten::mul", "aten::add", "aten::neg"]


def test_a_write_after_one_that_stays_is_rewritten():
    text = """
    graph(%x : Tensor, %y : Tensor):
      %one : int = prim::Constant[value=1]()
      %a : Tensor = aten::relu(%x)
      %b : Tensor = aten::add_.Tensor(%a, %y, %one)
      %mid : Tensor = aten::neg(%b)
      %c : Tensor = aten::relu_(%a)
      %d : Tensor = aten::sigmoid(%b)
      %e : Tensor = aten::tanh(%a)
      %o : (Tensor, Tensor, Tensor) = prim::TupleConstruct(%mid, %d, %e)
      return (%o)
    """
    after = assert_pass_preserves("functionalize", text,
                                  (torch.randn(4), torch.randn(4)),
                                  (torch.randn(2, 3), torch.randn(3)))
    # add_ has another tensor of unknown dtype: stays; relu_ after it: functional
    assert kinds(after) == ["aten::relu", "aten::add_", "aten::neg", "aten::relu",
                            "aten::sigmoid", "aten::tanh", "prim::TupleConstruct"]
    relu = after.nodes[-4]
    assert after.nodes[-3].inputs[0] is relu.output and after.nodes[-2].inputs[0] is relu.output


def scripted_case(x: torch.Tensor, y: torch.Tensor):
    a = x * 2
    before = a.sum()
    a.add_(1)
    a.relu_()
    b = torch.tanh(a)
    b.mul_(3)
    c = b * 1
    v = c[0]
    c.sigmoid_()  # c has a view: stays in place
    h = x.half() * 1
    h.add_(y)  # half += float stays half in place, but would promote: stays
    return a * 1, b + 0, v, before, h.float() * 1


def test_results_preserved_scripted():
    check_scripted(scripted_case, "functionalize", [torch.randn(3, 4), torch.randn(3, 4)],
                   [torch.randn(2, 1), torch.randn(2, 1)])
    prepared = sr.StaticModule(torch.jit.script(scripted_case), options=only("functionalize"))
    found = kinds(prepared.graph)
    assert "aten::relu" in found and "aten::relu_" not in found
    assert "aten::mul_" not in found
    assert found.count("aten::sigmoid_") == 1 and found.count("aten::add_") == 1


def test_scripted_graph_is_rewritten():
    from static_runtime.frontend.torchscript import import_torchscript

    def f(x: torch.Tensor):
        a = x * 2
        a.add_(1)
        a.relu_()
        return a + 1

    g = import_torchscript(torch.jit.script(f))
    assert run_pass("functionalize", g)
    assert kinds(g) == ["aten::mul", "aten::add", "aten::relu", "aten::add"]
