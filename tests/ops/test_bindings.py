"""Fast Python bindings: which binding a node gets, where it keeps ``torch.ops``, and that
both give the same results (Tensor and Scalar overloads, out variants, errors)."""


import pytest
import torch
from differential import assert_same, check
from op_cases import ts

import static_runtime as sr
from static_runtime.ops.registry import Tier, select
from static_runtime.passes.pipeline import PASS_ORDER

NO_PASSES = sr.StaticModuleOptions(**{p: False for p in PASS_ORDER})
VF, TB = torch._C._VariableFunctions, torch._C.TensorBase


def graph_of(ir: str):
    return sr.prepare(torch._C.parse_ir(ir.strip()), NO_PASSES)


def node_of(ir: str, kind: str):
    graph = graph_of(ir)
    return graph, next(n for n in graph.walk() if n.kind == kind)


def inputs_for(graph, node, values: list) -> list:
    """The node's inputs as the runtime passes them: graph inputs from ``values``,
    constants from the graph."""
    given = dict(zip(graph.inputs, values, strict=True))
    return [v.node.attrs.get("value") if v.node.kind == "prim::Constant" else given[v]
            for v in node.inputs]


def _ir(params: str, body: str, result: str = "Tensor") -> str:
    return f"graph({params}):\n{body}\n  return (%z)"


ADD = _ir("%x : Tensor, %y : Tensor", """
  %a : int = prim::Constant[value=1]()
  %z : Tensor = aten::add(%x, %y, %a)""")
ADD_ALPHA = _ir("%x : Tensor, %y : Tensor, %a : Scalar", """
  %z : Tensor = aten::add(%x, %y, %a)""")
ADD_SCALAR = _ir("%x : Tensor, %s : Scalar, %a : Scalar", """
  %z : Tensor = aten::add(%x, %s, %a)""")
SUB_SCALAR = _ir("%x : Tensor, %s : Scalar", """
  %a : int = prim::Constant[value=2]()
  %z : Tensor = aten::sub(%x, %s, %a)""")
MUL_SCALAR = _ir("%x : Tensor, %s : Scalar", """
  %z : Tensor = aten::mul(%x, %s)""")
DIV_SCALAR_MODE = _ir("%x : Tensor, %s : Scalar", """
  %m : str = prim::Constant[value="floor"]()
  %z : Tensor = aten::div(%x, %s, %m)""")
POW_SCALAR = _ir("%x : Tensor, %s : Scalar", """
  %z : Tensor = aten::pow(%x, %s)""")
WHERE_SCALAR_OTHER = _ir("%c : Tensor, %x : Tensor, %s : Scalar", """
  %z : Tensor = aten::where(%c, %x, %s)""")
CLAMP_MAX = _ir("%x : Tensor", """
  %lo : NoneType = prim::Constant()
  %hi : float = prim::Constant[value=0.25]()
  %z : Tensor = aten::clamp(%x, %lo, %hi)""")
ADDMM = _ir("%b : Tensor, %x : Tensor, %w : Tensor", """
  %one : int = prim::Constant[value=1]()
  %z : Tensor = aten::addmm(%b, %x, %w, %one, %one)""")
ADD_INPLACE = _ir("%x : Tensor, %s : Scalar", """
  %a : int = prim::Constant[value=1]()
  %z : Tensor = aten::add_(%x, %s, %a)""")
VIEW = _ir("%x : Tensor, %n : int", """
  %m : int = prim::Constant[value=-1]()
  %size : int[] = prim::ListConstruct(%n, %m)
  %z : Tensor = aten::view(%x, %size)""")
TRANSPOSE = _ir("%x : Tensor", """
  %0 : int = prim::Constant[value=0]()
  %1 : int = prim::Constant[value=1]()
  %z : Tensor = aten::transpose(%x, %0, %1)""")
SOFTMAX_DTYPE = _ir("%x : Tensor", """
  %d : int = prim::Constant[value=1]()
  %t : int = prim::Constant[value=7]()
  %z : Tensor = aten::softmax(%x, %d, %t)""")
SUM_DTYPE_OF = _ir("%x : Tensor, %y : Tensor", """
  %dims : int[] = prim::Constant[value=[1]]()
  %k : bool = prim::Constant[value=0]()
  %t : int = prim::dtype(%y)
  %z : Tensor = aten::sum(%x, %dims, %k, %t)""")
LINEAR = _ir("%x : Tensor, %w : Tensor, %b : Tensor", """
  %z : Tensor = aten::linear(%x, %w, %b)""")
SPLIT = _ir("%x : Tensor", """
  %s : int[] = prim::Constant[value=[1, 2]]()
  %d : int = prim::Constant[value=0]()
  %z : Tensor[] = aten::split(%x, %s, %d)""")
CLAMP_OPTIONAL = _ir("%x : Tensor, %lo : float?", """
  %hi : NoneType = prim::Constant()
  %z : Tensor = aten::clamp(%x, %lo, %hi)""")


# --------------------------------------------------------------------------- which binding


@pytest.mark.parametrize("ir, kind, tier, label", [
    (ADD, "aten::add", Tier.OUT, "torch.add(self, other, out=out)"),
    (ADD_SCALAR, "aten::add", Tier.FALLBACK, "Tensor.add(self, other, alpha=alpha)"),
    (SUB_SCALAR, "aten::sub", Tier.FALLBACK, "Tensor.sub(self, other, alpha=2)"),
    (ADDMM, "aten::addmm", Tier.OUT, "torch.addmm(self, mat1, mat2, out=out)"),
    (CLAMP_MAX, "aten::clamp", Tier.OUT, "torch.clamp(self, None, 0.25, out=out)"),
    (LINEAR, "aten::linear", Tier.OUT, "torch._C._nn.linear(input, weight, bias, out=out)"),
    (SOFTMAX_DTYPE, "aten::softmax", Tier.OUT, "torch.softmax(self, 1, torch.float64, out=out)"),
    (VIEW, "aten::view", Tier.FALLBACK, "Tensor.view"),
    (TRANSPOSE, "aten::transpose", Tier.FALLBACK, "Tensor.transpose"),
    (ADD_INPLACE, "aten::add_", Tier.FALLBACK, "Tensor.add_(self, other)"),
    (SPLIT, "aten::split", Tier.FALLBACK, "torch._C._VariableFunctions.split(self, [1, 2])"),
])
def test_fast_binding_is_chosen(ir, kind, tier, label):
    _, node = node_of(ir, kind)
    impl = select(node)
    assert impl.tier is tier
    assert impl.label == label


def test_inputs_passed_as_they_are_call_the_binding_itself():
    _, node = node_of(TRANSPOSE, "aten::transpose")
    assert select(node).fn is TB.transpose  # no list argument: the method first
    _, node = node_of(VIEW, "aten::view")
    assert select(node).fn is TB.view


def test_the_option_off_keeps_torch_ops():
    for ir, kind in ((ADD, "aten::add"), (VIEW, "aten::view"), (ADDMM, "aten::addmm")):
        _, node = node_of(ir, kind)
        assert select(node, fast_bindings=False).label.startswith(f"torch.ops.{kind[:4]}")


def test_non_constant_dtype_is_converted_per_call():
    # TorchScript passes a dtype that is not a constant as its int (``prim::dtype``): the
    # binding's wrapper turns it into the torch.dtype the binding takes.
    _, node = node_of(SUM_DTYPE_OF, "aten::sum")
    impl = select(node)
    assert impl.label == "torch.sum(self, [1], dtype=dtype)"
    x = torch.randn(3, 4)
    code = torch.ops.prim.dtype(torch.zeros(1, dtype=torch.float64))
    assert impl.fn(x, [1], False, code).dtype is torch.float64
    with pytest.raises((TypeError, IndexError)):
        impl.fn(x, [1], False, 10_000)
    fn = ts("x, y", "torch.sum(x, [1], dtype=y.dtype)")
    check(fn, [torch.randn(3, 4), torch.zeros(1, dtype=torch.float64)],
          [torch.randn(2, 5), torch.zeros(1, dtype=torch.float16)], atol=1e-3, rtol=1e-3)


def test_doubt_about_the_overload_keeps_torch_ops():
    # clamp(Tensor, Tensor? min, ...) comes first in the binding: a min that may be None or a
    # number may or may not fit it; the parser's choice would depend on the value.
    _, node = node_of(CLAMP_OPTIONAL, "aten::clamp")
    assert select(node).label.startswith("torch.ops.aten.clamp")


def test_describe_shows_the_binding():
    mod = sr.StaticModule(ts("b, x, w", "torch.addmm(b, x, w, beta=0.5)"))
    assert "torch.addmm(self, mat1, mat2, beta=0.5, out=out)" in mod.describe()


# --------------------------------------------------------------------------- same results


def _both(ir: str, kind: str):
    graph, node = node_of(ir, kind)
    return graph, node, select(node), select(node, fast_bindings=False)


def _outcome(fn, *args):
    try:
        return fn(*args), None
    except Exception as e:  # noqa: BLE001  (compared by type)
        return None, type(e)


def _same_outcome(fast, slow, *args):
    a, a_err = _outcome(fast, *args)
    b, b_err = _outcome(slow, *args)
    assert a_err == b_err
    if a_err is None:
        assert_same(a, b)
        if isinstance(b, torch.Tensor):
            assert a.dtype == b.dtype and a.stride() == b.stride()


i64 = torch.tensor([[3, -4, 5], [7, 0, -2]])
f32 = torch.tensor([[0.5, -1.5, 2.0], [3.25, 0.0, -7.0]])
b8 = torch.tensor([[True, False, True], [False, False, True]])
zero_dim = [torch.tensor(2), torch.tensor(2.5), torch.tensor(True),
            torch.tensor(3.0, dtype=torch.float64)]
scalars = [2, -3, 2.5, True, 0]


@pytest.mark.parametrize("x", [i64, f32, b8], ids=["int64", "float32", "bool"])
@pytest.mark.parametrize("y", [i64, f32, b8] + zero_dim,
                         ids=["int64", "float32", "bool", "0d_int", "0d_float", "0d_bool",
                              "0d_double"])
def test_tensor_overload_results_equal(x, y):
    for ir in (ADD, ADD_ALPHA):
        graph, node, fast, slow = _both(ir, "aten::add")
        for alpha in ((1, 2, 0.5) if ir is ADD_ALPHA else (None,)):
            values = [x, y] + ([alpha] if ir is ADD_ALPHA else [])
            args = inputs_for(graph, node, values)
            _same_outcome(fast.fn, slow.fn, *args)


@pytest.mark.parametrize("x", [i64, f32, b8], ids=["int64", "float32", "bool"])
@pytest.mark.parametrize("s", scalars, ids=[repr(s) for s in scalars])
def test_scalar_overload_results_equal(x, s):
    cases = [(ADD_SCALAR, "aten::add", [x, s, 1]), (ADD_SCALAR, "aten::add", [x, s, 3]),
             (ADD_SCALAR, "aten::add", [x, s, 1.5]), (SUB_SCALAR, "aten::sub", [x, s]),
             (MUL_SCALAR, "aten::mul", [x, s]), (DIV_SCALAR_MODE, "aten::div", [x, s]),
             (POW_SCALAR, "aten::pow", [x, s]),
             (WHERE_SCALAR_OTHER, "aten::where", [b8, x, s])]
    for ir, kind, values in cases:
        graph, node, fast, slow = _both(ir, kind)
        assert not fast.label.startswith("torch.ops"), fast.label
        args = inputs_for(graph, node, values)
        _same_outcome(fast.fn, slow.fn, *args)


@pytest.mark.parametrize("s", scalars, ids=[repr(s) for s in scalars])
def test_inplace_scalar_overload_writes_the_same(s):
    graph, node, fast, slow = _both(ADD_INPLACE, "aten::add_")
    for x in (i64, f32):
        a, b = x.clone(), x.clone()
        ra, ea = _outcome(fast.fn, *inputs_for(graph, node, [a, s]))
        rb, eb = _outcome(slow.fn, *inputs_for(graph, node, [b, s]))
        assert ea == eb
        assert_same(a, b)
        if ea is None:
            assert ra is a and rb is b


def test_out_variants_write_the_same():
    b, x, w = torch.randn(5), torch.randn(3, 4), torch.randn(4, 5)
    for ir, kind, values in [(ADDMM, "aten::addmm", [b, x, w]), (ADD, "aten::add", [x, x]),
                             (CLAMP_MAX, "aten::clamp", [x]),
                             (SOFTMAX_DTYPE, "aten::softmax", [x]),
                             (LINEAR, "aten::linear", [x, w.t().contiguous(), b])]:
        graph, node, fast, slow = _both(ir, kind)
        assert fast.tier is Tier.OUT and slow.tier is Tier.OUT
        args = inputs_for(graph, node, values)
        expected = slow.fn(*args)
        o1, o2 = torch.empty_like(expected), torch.empty_like(expected)
        fast.out_fn(o1, *args)
        slow.out_fn(o2, *args)
        assert_same(o1, o2)
        assert_same(fast.fn(*args), expected)


def test_list_results_are_lists():
    graph, node, fast, slow = _both(SPLIT, "aten::split")
    x = torch.arange(6.0).view(3, 2)
    out = fast.fn(*inputs_for(graph, node, [x]))
    assert type(out) is list
    assert_same(out, slow.fn(*inputs_for(graph, node, [x])))


# --------------------------------------------------------------------------- the replay
