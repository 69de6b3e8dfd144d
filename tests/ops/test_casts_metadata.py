"""Casts (``aten::to``, every overload), ``contiguous``, tensor metadata (``prim::device``,
``prim::dtype``, ``numel``, ``stride``...), creation with a dtype or device taken from an input,
and the list operators that are natives now (comparisons, ``in``, ``all``/``any``, string
``+``). The TorchScript interpreter is the oracle; a cast or ``contiguous`` that changes
nothing must return its input itself (``is``), and such a result of an input or of an
arena-planned intermediate must never be overwritten by a later call."""

import pytest
import torch
from differential import check
from op_cases import Inputs, case, ts

import static_runtime as sr
from static_runtime.ops.registry import Tier

I = Inputs(11)
randn, randint = I.randn, I.randint


def _cl(*shape):
    return randn(*shape).contiguous(memory_format=torch.channels_last)


CASES = [
    # aten::to.dtype
    case("to_same_dtype_is_input", ts("x", "x.to(torch.float32) is x"),
         [randn(3, 4)], [randn(2, 5)]),
    case("to_same_dtype", ts("x", "x.to(torch.float32)"), [randn(3, 4)], [randn(2, 5)]),
    case("to_other_dtype", ts("x", "x.to(torch.int32)"), [randn(3, 4) * 9], [randn(2, 5) * 9]),
    case("to_copy_copies", ts("x", "x.to(torch.float32, copy=True) is x"),
         [randn(3, 4)], [randn(2, 5)]),
    case("to_copy_values", ts("x", "x.to(torch.float32, copy=True)"), [randn(3, 4)],
         [randn(2, 5)]),
    case("to_non_blocking", ts("x", "x.to(torch.float64, non_blocking=True)"), [randn(3, 4)],
         [randn(2, 5)]),
    case("to_noncontiguous", ts("x", "x.t().to(torch.float64)"), [randn(3, 4)], [randn(2, 5)]),
    case("to_channels_last", ts("x", """
        y = x.to(torch.float32, memory_format=torch.channels_last)
        return y.is_contiguous(memory_format=torch.channels_last), y is x, y.stride(), y
        """), [randn(2, 3, 4, 5)], [_cl(1, 3, 2, 2)]),
    case("to_preserve_format", ts("x", """
        y = x.to(torch.float64)
        return y.stride(), y
        """), [_cl(2, 3, 4, 5)], [randn(1, 3, 2, 2).transpose(2, 3)]),
    case("to_dtype_of_input", ts("x, y", "x.to(y.dtype)"),
         [randn(3, 4), randint(0, 5, 2,)], [randn(2, 5), randn(2).double()]),
    case("to_dtype_of_input_is", ts("x, y", "x.to(y.dtype) is x"),
         [randn(3, 4), randint(0, 5, 2,)], [randn(2, 5), randn(2)]),
    case("to_x_dtype", ts("x", "x.to(x.dtype) is x, x.to(x.dtype)"), [randn(3, 4)],
         [randint(0, 5, 2, 5)]),
    case("to_dtype_layout", ts("x, y", "x.to(dtype=y.dtype, device=y.device)"),
         [randn(3, 4), randint(0, 5, 2,)], [randn(2, 5), randn(2)]),
    case("to_dtype_layout_copy", ts("x", "x.to(dtype=torch.float32, copy=True) is x"),
         [randn(3, 4)], [randn(2, 5)]),
    # aten::to.device / prim_Device / prim_dtype / other
    case("to_device", ts("x", "x.to(x.device, torch.float64)"), [randn(3, 4)], [randn(2, 5)]),
    case("to_device_same_is_input", ts("x", "x.to(x.device) is x"), [randn(3, 4)],
         [randn(2, 5)]),
    case("to_device_string", ts("x", "x.to('cpu')"), [randn(3, 4)], [randn(2, 5)]),
    case("to_device_copy", ts("x", "x.to(x.device, copy=True) is x"), [randn(3, 4)],
         [randn(2, 5)]),
    case("to_prim_dtype_none", ts("x, d: Optional[int]", "x.to(dtype=d)"),
         [randn(3, 4), None], [randn(2, 5), 7]),
    case("to_other", ts("x, y", "x.to(y)"), [randn(3, 4), randint(0, 5, 2,)],
         [randn(2, 5), randn(2).double()]),
    case("to_other_same_is_input", ts("x, y", "x.to(y) is x"), [randn(3, 4), randn(2)],
         [randn(2, 5), randn(3)]),
    case("to_other_copy", ts("x, y", "x.to(y, copy=True) is x"), [randn(3, 4), randn(2)],
         [randn(2, 5), randn(3)]),
    # contiguous
    case("contiguous_is_input", ts("x", "x.contiguous() is x"), [randn(3, 4)], [randn(2, 5)]),
    case("contiguous_of_transpose", ts("x", """
        y = x.t().contiguous()
        return y.stride(), y
        """), [randn(3, 4)], [randn(2, 5)]),
    case("contiguous_channels_last", ts("x", """
        y = x.contiguous(memory_format=torch.channels_last)
        return y.stride(), y is x, y
        """), [randn(2, 3, 4, 5)], [_cl(1, 3, 2, 2)]),
    case("contiguous_channels_last_rank_error",
         ts("x", "x.contiguous(memory_format=torch.channels_last)"), [randn(3, 4)],
         [randn(2, 5)]),
    case("contiguous_of_intermediate", ts("x", "(x * 2).t().contiguous()"), [randn(3, 4)],
         [randn(2, 5)]),
    # metadata
    case("metadata", ts("x", """
        return x.numel(), x.stride(), x.stride(1), x.dim(), x.is_contiguous(), x.size(), \\
            x.dtype, x.device, x.is_cuda, x.is_nested, x.layout
        """), [randn(3, 4)], [randn(2, 5).t()]),
    case("device_type", ts("x", "x.device.type"), [randn(3, 4)], [randn(2, 5)]),
    # creation with a dtype and device taken from an input
    case("zeros_device_of_input", ts("x", "torch.zeros(2, x.size(0), 4, device=x.device)"),
         [randn(3, 4)], [randn(2, 5)]),
    case("zeros_dtype_of_input",
         ts("x", "torch.zeros(2, x.size(0), 4, device=x.device, dtype=x.dtype)"),
         [randn(3, 4)], [randint(0, 5, 2, 5)]),
    case("full_dtype_of_input", ts("x", "torch.full([x.size(0)], 2.5, dtype=x.dtype)"),
         [randn(3, 4)], [randn(2, 5).double()]),
    case("zeros_like_dtype_of_input", ts("x, y", "torch.zeros_like(x, dtype=y.dtype)"),
         [randn(3, 4), randint(0, 5, 2,)], [randn(2, 5), randn(2).double()]),
    case("arange_dtype_of_input",
         ts("x", "torch.arange(0, x.size(0), 1, dtype=x.dtype, device=x.device)"),
         [randn(3, 4)], [randint(0, 5, 2, 5)]),
    case("new_zeros_dtype", ts("x, y", "x.new_zeros([2, 3], dtype=y.dtype)"),
         [randn(3, 4), randint(0, 5, 2,)], [randn(2, 5), randn(2).half()]),
    # list operators
    case("int_list_compare", ts("x, s: List[int]", "x.size() != s, x.size() == s, s == [1, 2], s != []"), [randn(3, 4), [3, 4]], [randn(2, 5), [2, 5, 1]]),
    case("str_bool_list_compare", ts("a: List[str], b: List[bool]", "a == ['x', 'y'], a != ['x'], b == [True, False], b != [True]"), [["x", "y"], [True, False]], [["x"], [True]]),
    case("contains", ts("d: Dict[str, Tensor], s: List[int], n: int, t: List[str]", "'k' in d, n in s, 'z' in t, 3 in [1, 2, 3]"), [{"k": randn(2)}, [1, 2], 2, ["z"]], [{"j": randn(2)}, [5], 3, []]),
    case("contains_float_nan", ts("s: List[float], v: float", "v in s"),
         [[1.0, float("nan")], float("nan")], [[2.5], 2.5]),
    case("all_any", ts("a: List[int], b: List[bool], c: List[float], s: List[str]", "all(a), any(a), all(b), any(b), all(c), any(c), any(s)"), [[1, 2, 0], [True, True], [0.0, float("nan")], ["", "a"]],
         [[], [False], [1.5], [""]]),
    case("str_concat", ts("a: str, b: str", "a + b"), ["ab", "cd"], ["", "x"]),
]


@pytest.mark.parametrize("model,first,second,tol", CASES)
def test_against_torchscript(model, first, second, tol):
    check(model, first, second, **tol)


def _impls(fn) -> dict[str, list]:
    mod = sr.StaticModule(fn)
    out: dict[str, list] = {}
    for pn in mod.plan.nodes():
        out.setdefault(pn.kind, []).append(pn.impl)
    return out


def test_natives_replace_torch_ops():
    fn = ts("x, y", """
        a = x.to(y.dtype).contiguous()
        b = torch.zeros(2, x.size(0), device=x.device, dtype=y.dtype)
        return a, b, x.numel(), x.size() != [1], 3 in x.size()
        """)
    impls = _impls(fn)
    for kind in ("aten::to", "aten::contiguous", "prim::device", "prim::dtype", "aten::numel",
                 "aten::ne", "aten::__contains__"):
        assert all(i.tier is Tier.NATIVE for i in impls[kind]), (kind, impls[kind])
    assert all("torch.ops" not in i.label for i in impls["aten::zeros"])


def test_layout_argument_keeps_torch_ops():
    # The binding takes no layout: ``to.dtype_layout`` with one is left to torch.ops.
    graph = """graph(%x : Tensor):
  %d : int = prim::Constant[value=6]()
  %l : int = prim::Constant[value=0]()
  %n : NoneType = prim::Constant()
  %f : bool = prim::Constant[value=0]()
  %y : Tensor = aten::to(%x, %d, %l, %n, %n, %f, %f, %n)
  return (%y)"""
    impls = _impls(torch._C._create_function_from_graph("f", torch._C.parse_ir(graph)))
    assert impls["aten::to"][0].tier is Tier.NATIVE  # strided is the binding's own
    check(graph, [randn(3, 4)], [randn(2, 5)])


@pytest.mark.parametrize("expr", ["y.to(torch.float32)", "y.contiguous()",
                                  "y.to(y.dtype)", "y.to(y.device)"])
def test_noop_result_of_intermediate_is_never_overwritten(expr):
    # ``y`` would live in the arena, but the result (``y`` itself) is returned: the alias
    # analysis must keep ``y`` out of the arena, or the next call would overwrite it.
    fn = ts("x", f"""
        y = x * 2
        z = {expr}
        return z, z is y
        """)
    mod = sr.StaticModule(fn)
    x1, x2 = randn(3, 4), randn(3, 4)
    first, same = mod(x1)
    assert same
    kept = first.clone()
    second, _ = mod(x2)
    torch.testing.assert_close(first, kept)
    torch.testing.assert_close(second, x2 * 2)
    assert first.data_ptr() != second.data_ptr()


@pytest.mark.parametrize("expr", ["x.to(torch.float32)", "x.contiguous()", "x.to(x.dtype)"])
def test_noop_result_of_input_is_the_input(expr):
    fn = ts("x", f"""
        z = {expr}
        w = z + 1
        return z, w
        """)
    mod = sr.StaticModule(fn)
    x = randn(3, 4)
    before = x.clone()
    z, w = mod(x)
    assert z is x
    mod(randn(3, 4))
    torch.testing.assert_close(x, before)
    torch.testing.assert_close(w, before + 1)
