"""Elementwise operators: arithmetic with broadcasting and type promotion, tensor-scalar
forms, comparison, logical and bitwise ops, where/clamp/pow/fmod/remainder, division
rounding modes, lerp, addcmul/addcdiv, unary math, in-place updates of intermediates."""

import pytest
import torch
from differential import check
from op_cases import Inputs, case, layout, ts

I = Inputs(1)
randn, rand, randint, bools = I.randn, I.rand, I.randint, I.bools


def chain(x: torch.Tensor, y: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
    # intermediates live across several nodes: exercises kept out-variant tensors
    a = x + y
    b = a * z
    c = b - x
    d = torch.relu(c) / (a.abs() + 1)
    return d * a + b


def inplace_on_intermediate(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    a = x * 2
    a.add_(y)
    a.mul_(3)
    a.clamp_(-1.0, 1.0)
    return a - x


def inplace_alias_read(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    a = x + 1
    v = a[0]
    a.mul_(2)  # v sees the write
    return v + 0, a


def scalar_from_tensor(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    s = float(x.sum())
    return y * s + x.numel()


def int_pipeline(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    a = x * y + 3
    b = a // 2
    c = b % 5
    return (c << 1) | (a & 7)


BIN = [
    # name, source, first, second
    ("add", ts("x, y", "x + y"), [randn(3, 4), randn(3, 4)], [randn(5, 2), randn(5, 2)]),
    ("add_broadcast_row", ts("x, y", "x + y"), [randn(3, 4), randn(4)], [randn(2, 6), randn(6)]),
    ("add_broadcast_both", ts("x, y", "x + y"),
     [randn(3, 1, 4), randn(5, 1)], [randn(2, 1), randn(1, 7)]),
    ("add_alpha", ts("x, y", "torch.add(x, y, alpha=2.5)"),
     [randn(3, 4), randn(3, 4)], [randn(6), randn(6)]),
    ("add_int_alpha", ts("x, y", "torch.add(x, y, alpha=3)"),
     [randint(-5, 5, 4), randint(-5, 5, 4)], [randint(-5, 5, 2, 3), randint(-5, 5, 3)]),
    ("add_scalar_float", ts("x", "x + 1.5"), [randn(3, 4)], [randn(7)]),
    ("add_scalar_param_int", ts("x, k: int", "x + k"), [randn(3, 4), 3], [randn(2, 5), -2]),
    ("add_scalar_param_float", ts("x, s: float", "torch.add(x, s, alpha=2)"),
     [randn(3, 4), 0.5], [randn(5), -1.25]),
    ("sub", ts("x, y", "x - y"), [randn(3, 4), randn(3, 4)], [randn(2, 2, 2), randn(2, 1, 2)]),
    ("sub_alpha", ts("x, y", "torch.sub(x, y, alpha=0.5)"),
     [randn(3, 4), randn(4)], [randn(5, 3), randn(3)]),
    ("rsub_scalar", ts("x", "2.0 - x"), [randn(3, 4)], [randn(6)]),
    ("rsub_op", ts("x, y", "torch.rsub(x, y, alpha=2)"),
     [randn(3, 4), randn(3, 4)], [randn(6), randn(6)]),
    ("mul_broadcast", ts("x, y", "x * y"), [randn(2, 3, 4), randn(3, 1)],
     [randn(4, 5), randn(1, 5)]),
    ("mul_scalar_param", ts("x, s: float", "x * s"), [randn(3, 4), 2.0], [randn(5), -0.5]),
    ("div", ts("x, y", "x / y"), [randn(3, 4), rand(3, 4, low=0.5, high=2)],
     [randn(2, 5), rand(5, low=0.5, high=2)]),
    ("div_scalar", ts("x", "x / 3"), [randn(3, 4)], [randn(9)]),
    ("div_trunc", ts("x, y", "torch.div(x, y, rounding_mode='trunc')"),
     [randn(3, 4) * 5, rand(3, 4, low=0.5, high=2)], [randn(6) * 5, rand(6, low=0.5, high=2)]),
    ("div_floor", ts("x, y", "torch.div(x, y, rounding_mode='floor')"),
     [randn(3, 4) * 5, rand(4, low=0.5, high=2)], [randn(2, 3) * 5, rand(3, low=0.5, high=2)]),
    ("div_floor_scalar", ts("x", "torch.div(x, 2, rounding_mode='floor')"),
     [randint(-9, 9, 3, 4)], [randint(-9, 9, 7)]),
    ("div_int_true", ts("x, y", "x / y"),
     [randint(-9, 9, 3, 4), randint(1, 5, 3, 4)], [randint(-9, 9, 5), randint(1, 5, 5)]),
    ("floor_divide_int", ts("x, y", "x // y"),
     [randint(-9, 9, 3, 4), randint(1, 5, 4)], [randint(-9, 9, 2, 5), randint(1, 5, 5)]),
    ("true_divide", ts("x, y", "torch.true_divide(x, y)"),
     [randint(0, 9, 6), rand(6, low=1, high=2)], [randint(0, 9, 2, 2), rand(2, 2, low=1, high=2)]),
    ("add_int", ts("x, y", "x + y"),
     [randint(-9, 9, 3, 4), randint(-9, 9, 3, 4)], [randint(-9, 9, 5), randint(-9, 9, 5)]),
    ("promote_int_float_scalar", ts("x", "x * 1.5"), [randint(-9, 9, 3, 4)], [randint(0, 3, 5)]),
    ("promote_int_float_tensor", ts("x, y", "x * y"),
     [randint(-9, 9, 3, 4), randn(3, 4)], [randint(-9, 9, 5), randn(1)]),
    ("promote_int32_int64", ts("x, y", "x + y"),
     [randint(-9, 9, 3, 4, dtype=torch.int32), randint(-9, 9, 3, 4)],
     [randint(-9, 9, 5, dtype=torch.int32), randint(-9, 9, 5)]),
    ("promote_f32_f64", ts("x, y", "x - y"),
     [randn(3, 4), randn(3, 4, dtype=torch.float64)], [randn(5), randn(5, dtype=torch.float64)]),
    ("zero_dim_operand", ts("x, y", "x * y + y"), [randn(3, 4), torch.tensor(2.0)],
     [randn(6), torch.tensor(-0.5)]),
    ("dtype_switch_f32_f64", ts("x, y", "(x + y) * 2"), [randn(3, 4), randn(4)],
     [randn(5, dtype=torch.float64), randn(5, dtype=torch.float64)]),
    ("dtype_switch_int_float", ts("x", "(x * 3) // 2"), [randint(-9, 9, 3, 4)], [randn(5) * 9]),
    ("empty_second_input", ts("x, y", "(x + y) * torch.sigmoid(x)"), [randn(3, 4), randn(4)],
     [randn(0, 4), randn(4)]),
    ("promote_zero_dim_then_dims", ts("x, y", "(x + y) * 2"),
     [randn(3, 4), torch.tensor(2.0, dtype=torch.float64)],
     [randn(4), randn(4, dtype=torch.float64)]),
    ("promote_intermediate_zero_dim", ts("x, y", "(x + y.sum(-1)) * 2"),
     [randn(3), randn(3, dtype=torch.float64)], [randn(4, 1), randn(4, 2, dtype=torch.float64)]),
    ("bool_add", ts("x, y", "x + y"), [bools(3, 4), bools(3, 4)], [bools(6), bools(6)]),
    ("bool_mul_float", ts("m, y", "m * y"), [bools(3, 4), randn(3, 4)], [bools(5), randn(5)]),
    ("double_tensor", ts("x", "x * 2 + 1"), [randn(3, 4, dtype=torch.float64)],
     [randn(5, dtype=torch.float64)]),
    ("noncontiguous_input", ts("x, y", "x * y + x"),
     [randn(4, 3).t(), randn(3, 4)], [randn(5, 2).t(), randn(2, 5)]),
    ("strided_result_then_reshape", ts("x", "(x + 1).reshape(-1)"),
     [randn(4, 3).t()], [randn(6, 2).t()]),
    ("strided_result_then_view", ts("x", "(x * 2).view(-1)"),
     [randn(4, 3).t()], [randn(6, 2).t()]),
    ("maximum", ts("x, y", "torch.maximum(x, y)"), [randn(3, 4), randn(4)], [randn(5), randn(5)]),
    ("minimum", ts("x, y", "torch.minimum(x, y)"),
     [randn(3, 4), randn(3, 4)], [randn(2, 1), randn(3)]),
    ("fmax_nan", ts("x, y", "torch.fmax(x, y)"),
     [torch.tensor([1.0, float("nan"), 3.0]), torch.tensor([float("nan"), 2.0, 1.0])],
     [randn(4), randn(4)]),
    ("atan2", ts("x, y", "torch.atan2(x, y)"), [randn(3, 4), randn(3, 4)], [randn(5), randn(5)]),
    ("hypot", ts("x, y", "torch.hypot(x, y)"), [randn(3, 4), randn(4)], [randn(5), randn(5)]),
    ("copysign", ts("x, y", "torch.copysign(x, y)"),
     [randn(3, 4), randn(3, 4)], [randn(5), randn(1)]),
    ("squared_difference", ts("x, y", "(x - y) * (x - y)"),
     [randn(3, 4), randn(3, 4)], [randn(8), randn(8)]),
]

CMP = [
    ("eq", ts("x, y", "x == y"), [randint(0, 3, 3, 4), randint(0, 3, 3, 4)],
     [randint(0, 3, 6), randint(0, 3, 6)]),
    ("ne", ts("x, y", "x != y"), [randint(0, 3, 3, 4), randint(0, 3, 4)],
     [randint(0, 3, 2, 6), randint(0, 3, 6)]),
    ("lt", ts("x, y", "x < y"), [randn(3, 4), randn(3, 4)], [randn(5), randn(5)]),
    ("le_scalar", ts("x", "x <= 0.25"), [randn(3, 4)], [randn(5)]),
    ("gt_broadcast", ts("x, y", "x > y"), [randn(3, 4), randn(3, 1)], [randn(2, 5), randn(5)]),
    ("ge_int_param", ts("x, k: int", "x >= k"), [randint(0, 9, 3, 4), 4], [randint(0, 9, 7), 2]),
    ("eq_bool", ts("x, y", "torch.eq(x, y)"), [bools(3, 4), bools(3, 4)], [bools(5), bools(5)]),
    ("cmp_then_sum", ts("x, y", "(x > y).sum()"), [randn(3, 4), randn(3, 4)],
     [randn(5), randn(5)]),
    ("isclose", ts("x, y", "torch.isclose(x, y, rtol=0.1, atol=0.1)"),
     [randn(3, 4), randn(3, 4)], [randn(5), randn(5)]),
    ("isnan_isinf", ts("x", "(torch.isnan(x), torch.isinf(x), torch.isfinite(x))"),
     [torch.tensor([1.0, float("nan"), float("inf"), -float("inf")])],
     [torch.tensor([[0.0, float("nan")], [2.0, 3.0]])]),
    ("nan_to_num", ts("x", "torch.nan_to_num(x, nan=0.0, posinf=9.0, neginf=-9.0)"),
     [torch.tensor([1.0, float("nan"), float("inf"), -float("inf")])],
     [torch.tensor([[float("nan")], [2.0]])]),
]

LOGIC = [
    ("logical_and", ts("x, y", "torch.logical_and(x, y)"), [bools(3, 4), bools(3, 4)],
     [bools(5), bools(5)]),
    ("logical_or_float", ts("x, y", "torch.logical_or(x, y)"),
     [randint(0, 2, 3, 4).float(), randn(3, 4)], [randint(0, 2, 5).float(), randn(5)]),
    ("logical_xor", ts("x, y", "torch.logical_xor(x, y)"), [bools(3, 4), bools(4)],
     [bools(6), bools(6)]),
    ("logical_not", ts("x", "torch.logical_not(x)"), [randint(0, 3, 3, 4)], [randint(0, 3, 5)]),
    ("bitwise_and_int", ts("x, y", "x & y"), [randint(0, 64, 3, 4), randint(0, 64, 3, 4)],
     [randint(0, 64, 5), randint(0, 64, 5)]),
    ("bitwise_or_bool", ts("x, y", "x | y"), [bools(3, 4), bools(3, 4)], [bools(7), bools(7)]),
    ("bitwise_xor", ts("x, y", "torch.bitwise_xor(x, y)"),
     [randint(0, 64, 3, 4), randint(0, 64, 4)], [randint(0, 64, 5), randint(0, 64, 5)]),
    ("bitwise_not_int", ts("x", "~x"), [randint(-9, 9, 3, 4)], [randint(-9, 9, 6)]),
    ("bitwise_not_bool", ts("x", "torch.bitwise_not(x)"), [bools(3, 4)], [bools(6)]),
    ("shifts", ts("x", "(x << 2, x >> 1)"), [randint(0, 64, 3, 4)], [randint(0, 64, 5)]),
    ("int_pipeline", int_pipeline, [randint(-9, 9, 3, 4), randint(-9, 9, 3, 4)],
     [randint(-9, 9, 6), randint(-9, 9, 6)]),
]

SELECT = [
    ("where", ts("c, x, y", "torch.where(c, x, y)"), [bools(3, 4), randn(3, 4), randn(3, 4)],
     [bools(5), randn(5), randn(5)]),
    ("where_broadcast", ts("c, x, y", "torch.where(c, x, y)"),
     [bools(3, 1), randn(4), randn(3, 4)], [bools(2, 5), randn(1, 5), randn(2, 1)]),
    ("where_scalar_other", ts("x", "torch.where(x > 0, x, 0.0)"), [randn(3, 4)], [randn(5)]),
    ("where_scalars", ts("x", "torch.where(x > 0, 1.0, -1.0)"), [randn(3, 4)], [randn(5)]),
    ("where_int_promote", ts("c, x, y", "torch.where(c, x, y)"),
     [bools(3, 4), randint(0, 9, 3, 4), randn(3, 4)], [bools(5), randint(0, 9, 5), randn(5)]),
    ("clamp", ts("x", "torch.clamp(x, -0.5, 0.5)"), [randn(3, 4)], [randn(5)]),
    ("clamp_min_only", ts("x", "torch.clamp(x, min=0.1)"), [randn(3, 4)], [randn(5)]),
    ("clamp_max_only", ts("x", "x.clamp(max=-0.1)"), [randn(3, 4)], [randn(5)]),
    ("clamp_tensor_bounds", ts("x, lo, hi", "torch.clamp(x, lo, hi)"),
     [randn(3, 4), randn(4) - 1, randn(3, 1) + 1], [randn(5), randn(1) - 1, randn(5) + 1]),
    ("clamp_int", ts("x", "torch.clamp(x, 0, 5)"), [randint(-9, 9, 3, 4)], [randint(-9, 9, 7)]),
    ("clamp_min_op", ts("x, lo: float", "torch.clamp_min(x, lo)"),
     [randn(3, 4), 0.0], [randn(5), -0.5]),
    ("clamp_max_op", ts("x", "torch.clamp_max(x, 0.3)"), [randn(3, 4)], [randn(5)]),
]

POW = [
    ("pow_scalar", ts("x", "x ** 2"), [randn(3, 4)], [randn(5)]),
    ("pow_frac", ts("x", "torch.pow(x, 0.5)"), [rand(3, 4)], [rand(5)]),
    ("pow_tensor", ts("x, y", "torch.pow(x, y)"), [rand(3, 4, low=0.1), randn(3, 4)],
     [rand(5, low=0.1), randn(5)]),
    ("pow_scalar_base", ts("x", "torch.pow(2.0, x)"), [randn(3, 4)], [randn(5)]),
    ("pow_int", ts("x", "x ** 3"), [randint(-4, 4, 3, 4)], [randint(-4, 4, 5)]),
    ("square", ts("x", "torch.square(x)"), [randn(3, 4)], [randn(5)]),
    ("fmod_tensor", ts("x, y", "torch.fmod(x, y)"),
     [randn(3, 4) * 5, rand(3, 4, low=0.5, high=2)], [randn(5) * 5, rand(1, low=0.5, high=2)]),
    ("fmod_scalar", ts("x", "torch.fmod(x, 1.5)"), [randn(3, 4) * 5], [randn(5) * 5]),
    ("fmod_int", ts("x", "torch.fmod(x, 3)"), [randint(-9, 9, 3, 4)], [randint(-9, 9, 5)]),
    ("remainder_tensor", ts("x, y", "torch.remainder(x, y)"),
     [randn(3, 4) * 5, rand(4, low=0.5, high=2)], [randn(5) * 5, rand(5, low=0.5, high=2)]),
    ("remainder_op", ts("x", "x % 2.5"), [randn(3, 4) * 5], [randn(6) * 5]),
    ("remainder_int_neg", ts("x, y", "x % y"),
     [randint(-9, 9, 3, 4), randint(1, 4, 3, 4)], [randint(-9, 9, 5), -randint(1, 4, 5)]),
]

TERNARY = [
    ("lerp_scalar", ts("x, y", "torch.lerp(x, y, 0.3)"), [randn(3, 4), randn(3, 4)],
     [randn(5), randn(5)]),
    ("lerp_tensor", ts("x, y, w", "torch.lerp(x, y, w)"),
     [randn(3, 4), randn(3, 4), rand(3, 4)], [randn(5), randn(5), rand(5)]),
    ("addcmul", ts("x, a, b", "torch.addcmul(x, a, b, value=0.5)"),
     [randn(3, 4), randn(3, 4), randn(4)], [randn(5), randn(5), randn(5)]),
    ("addcdiv", ts("x, a, b", "torch.addcdiv(x, a, b, value=2)"),
     [randn(3, 4), randn(3, 4), rand(3, 4, low=0.5)], [randn(2, 3), randn(3), rand(3, low=0.5)]),
]

UNARY_FNS = ["neg", "abs", "sign", "exp", "sin", "cos", "tan", "floor", "ceil", "round",
             "trunc", "frac", "expm1", "erf", "atan", "sinh", "asinh", "sgn"]
POSITIVE_FNS = ["log", "log2", "log10", "log1p", "sqrt", "rsqrt", "reciprocal", "lgamma",
                "digamma"]
UNARY = [(f"unary_{f}", ts("x", f"torch.{f}(x)"), [randn(3, 4) * 2], [randn(7) * 2])
         for f in UNARY_FNS]
UNARY += [(f"unary_{f}", ts("x", f"torch.{f}(x)"), [rand(3, 4, low=0.1, high=3)],
           [rand(2, 5, low=0.1, high=3)]) for f in POSITIVE_FNS]
UNARY += [
    ("unary_int_abs_neg_sign", ts("x", "(torch.abs(x), -x, torch.sign(x))"),
     [randint(-9, 9, 3, 4)], [randint(-9, 9, 5)]),
    ("round_decimals", ts("x", "torch.round(x, decimals=2)"), [randn(3, 4)], [randn(5)]),
    ("acos_asin", ts("x", "torch.acos(x) + torch.asin(x)"), [rand(3, 4, low=-1, high=1)],
     [rand(5, low=-1, high=1)]),
    ("exp_int_promotes", ts("x", "torch.exp(x)"), [randint(-3, 3, 3, 4)], [randint(-3, 3, 5)]),
]

GRAPHS = [
    ("chain", chain, [randn(3, 4), randn(3, 4), randn(4)], [randn(2, 5), randn(5), randn(2, 5)]),
    ("inplace_on_intermediate", inplace_on_intermediate, [randn(3, 4), randn(3, 4)],
     [randn(5), randn(5)]),
    ("inplace_alias_read", inplace_alias_read, [randn(3, 4)], [randn(2, 6)]),
    ("inplace_on_input_clone", ts("x, y", """
        z = x.clone()
        z.sub_(y, alpha=2)
        z.div_(2)
        return z
     """), [randn(3, 4), randn(3, 4)], [randn(5), randn(1)]),
    ("scalar_from_tensor", scalar_from_tensor, [randn(3, 4), randn(3, 4)], [randn(5), randn(6)]),
    ("reuse_value_twice", ts("x", """
        a = torch.exp(x)
        b = a + a
        c = b * a
        return c - b
     """), [randn(3, 4)], [randn(6, 2)]),
]

# Small and reduced-precision dtypes: type promotion with scalars and out variants.
DTYPES = [torch.uint8, torch.int8, torch.int16, torch.float16, torch.bfloat16]
SMALL_DTYPES = [
    (f"{kind}_{str(dt).split('.')[-1]}", model,
     [(randn(3, 4) * 5).to(dt), (randn(3, 4) * 5).to(dt)], [(randn(5) * 5).to(dt),
                                                           (randn(5) * 5).to(dt)])
    for dt in DTYPES
    for kind, model in [
        ("arith", ts("x, y", "(x + y) * 2 - x")),
        ("float_scalar_cmp", ts("x, y", "(x * 1.5 + 1, (x > y) & (x != 0))")),
        ("max_div", ts("x, y", "torch.maximum(torch.relu(x), y) / (y.abs() + 1)")),
    ]
]

# The result's strides follow a transposed input, on every call (see ``op_cases.layout``).
LAYOUT = [(f"layout_{name}", layout(expr), [randn(4, 3)], [randn(6, 5)]) for name, expr in [
    ("mul_scalar", "y * 2"), ("add_tensor", "y + y"), ("sub_scalar", "y - 1"),
    ("div_scalar", "y / 2"), ("abs", "torch.abs(y)"), ("neg", "-y"), ("exp", "torch.exp(y)"),
    ("where", "torch.where(y > 0, y, 0.0)"), ("clamp", "torch.clamp(y, -0.5, 0.5)"),
    ("gt", "y > 0"), ("pow", "torch.pow(y, 2)"), ("lerp", "torch.lerp(y, y, 0.3)"),
    ("addcmul", "torch.addcmul(y, y, y)"), ("bitwise_not", "~(y > 0)"),
    ("fmod", "torch.fmod(y, 1.5)"), ("div_floor", "torch.div(y, 2, rounding_mode='floor')"),
    ("nan_to_num", "torch.nan_to_num(y)"), ("round", "torch.round(y)"),
]]
# A contiguous input first (its result is kept), then a transposed one written into it.
LAYOUT += [(f"layout_after_contiguous_{name}", layout(expr, "x"), [randn(3, 4)],
            [randn(5, 4).t()]) for name, expr in [
    ("mul_scalar", "y * 2"), ("add_tensor", "y + y"), ("div_scalar", "y / 2"),
    ("abs", "torch.abs(y)"), ("where", "torch.where(y > 0, y, 0.0)"),
]]

CASES = [case(*c[:4], xfail=c[4] if len(c) > 4 else None)
         for c in BIN + CMP + LOGIC + SELECT + POW + TERNARY + UNARY + GRAPHS + SMALL_DTYPES
         + LAYOUT]


@pytest.mark.parametrize("model, first, second, tol", CASES)
def test_elementwise(model, first, second, tol):
    check(model, first, second, **tol)
