"""Differential cases for TorchScript's scalars and strings: int/float/bool arithmetic with
TorchScript's semantics, conversions between tensors and scalars, tensor metadata
(``size``, ``dim``, ``numel``...), string operations and formatting, ``Optional``
refinement, ``isinstance`` and ``NumToTensor``."""

import math

import pytest
import torch
from differential import check


def r(*shape):
    return torch.randn(*shape)


# --------------------------------------------------------------------------- arithmetic


def int_arith(a: int, b: int):
    return a + b, a - b, a * b, -a, a + 3 * b - 1


def int_floordiv_mod(a: int, b: int):
    return a // b, a % b


def float_floordiv_mod(a: float, b: float):
    return a // b, a % b


def true_division(a: int, b: int):
    return a / b, float(a) / 2.0


def int_pow(a: int, b: int):
    return a ** b


def float_pow(a: float, b: float):
    return a ** b, a ** 2, 2.0 ** b


def mixed_int_float(a: int, b: float):
    return a * b, a + b, b - a, a / b, a < b, b >= a


def comparisons(a: int, b: int):
    return a < b, a <= b, a > b, a >= b, a == b, a != b


def chained_comparison(a: int, b: int, c: int):
    return a < b < c, a <= b == c


def boolean_logic(a: bool, b: bool, c: bool):
    return (a and b) or not c, a ^ b, a | (b & c), not (a or b)


def bool_short_circuit(xs: list[int], i: int):
    # The right operand must not run when the left one decides: xs[i] would raise.
    ok = i < len(xs) and xs[i] > 0
    other = i >= len(xs) or xs[i] < 0
    return ok, other


def min_max_scalars(a: int, b: int, x: float, y: float):
    return min(a, b), max(a, b), min(x, y), max(x, y), max(a, 0)


def abs_scalars(a: int, x: float):
    return abs(a), abs(x), abs(-a)


def divmod_ints(a: int, b: int):
    return divmod(a, b)


def divmod_by_zero(a: int, b: int):
    return divmod(a, b)


def scalar_item_arith(x: torch.Tensor, d: int):
    # ``item()`` is a Scalar (``number``): int or float semantics follow the value's type.
    v = x.item()
    return v // d, v % d, v / d, v * d, -v


def int_division_by_zero(a: int, b: int):
    return a // b


def float_modulo_by_zero(x: float, y: float):
    return x % y


def true_division_by_zero(a: int, b: int):
    return a / b


def float_division_by_zero(x: float, y: float):
    return x / y


def float_floordiv_by_zero(x: float, y: float):
    return x // y


def augmented_assignment(a: int):
    b = a
    b += 3
    b *= 2
    b -= 1
    b = b // 3
    return b


def int_bitwise(a: int, b: int):
    return a & b, a | b, a ^ b, a << 2, a >> 1


def float_special_values(x: float):
    # Not ``x == x``: TorchScript's peephole pass folds it to True, even for NaN.
    inf = float("inf")
    return x < inf, math.isnan(x), math.isinf(x), x == inf, x != 1.0


def round_floats(x: float):
    return round(x)


# --------------------------------------------------------------------------- math.*


def math_functions(x: float):
    return (math.sqrt(x), math.floor(x), math.ceil(x), math.log(x), math.exp(x),
            math.fabs(-x), math.sin(x), math.log10(x))


def math_constants(x: float):
    return x * math.pi, x + math.e, math.inf > x


def math_int_functions(a: int, b: int):
    return math.gcd(a, b), math.factorial(abs(b) % 6), math.copysign(1.0, float(a))


def math_sqrt_negative(x: float):
    return math.sqrt(x)


def math_floor_ceil_negative(x: float):
    return math.floor(x), math.ceil(x), int(x)


# --------------------------------------------------------------------------- conversions


def int_of_tensor(x: torch.Tensor):
    return int(x), int(x * 2)


def float_of_tensor(x: torch.Tensor):
    return float(x), float(x.sum())


def bool_of_tensor(x: torch.Tensor):
    return bool(x > 0), bool(x)


def int_of_float(x: float):
    return int(x), int(-x)


def float_of_int_bool(a: int, b: bool):
    return float(a), float(b), int(b), bool(a)


def int_float_of_str(s: str):
    return int(s), float(s)


def float_edge_semantics(a: float, b: float):
    # TorchScript: floor(a / b) and fmod(b + fmod(a, b), b); Python differs on both.
    return a // b, a % b, a ** 0.5, min(a, b), max(b, a)


def bool_of_multi_element_tensor(x: torch.Tensor):
    if bool(x):
        return x
    return -x


def item_values(x: torch.Tensor, y: torch.Tensor):
    a = x.item()
    b = y.item()
    return a, b


def item_in_arithmetic(x: torch.Tensor):
    v = x.sum().item()
    return float(v) * 2.0


# --------------------------------------------------------------------------- tensor metadata


def size_dim_numel(x: torch.Tensor):
    return x.size(0), x.size(-1), x.dim(), x.numel(), x.ndim


def shape_index(x: torch.Tensor):
    return x.shape[0] * x.shape[-1], x.shape, len(x.shape)


def len_of_tensor(x: torch.Tensor):
    return len(x)


def size_of_zero_dim_raises(x: torch.Tensor):
    return x.size(0)


def size_arith_into_view(x: torch.Tensor):
    n = x.size(0)
    m = x.numel() // n
    return x.reshape(m, n), n * m


def dtype_and_device(x: torch.Tensor):
    return x.dtype == torch.float32, x.is_floating_point(), x.device.type


def scalar_type_arg(x: torch.Tensor):
    return x.to(torch.float64).sum(), torch.zeros(2, dtype=x.dtype)


# --------------------------------------------------------------------------- NumToTensor


def tensor_of_int(n: int):
    return torch.tensor(n), torch.tensor(float(n)) * 2


def tensor_plus_size(x: torch.Tensor):
    return x + x.size(0), x * x.dim(), x.size(0) - x


NUM_TO_TENSOR_IR = """graph(%x : Tensor):
  %c0 : int = prim::Constant[value=0]()
  %c1 : int = prim::Constant[value=1]()
  %n : int = aten::size(%x, %c0)
  %t : Tensor = prim::NumToTensor(%n)
  %r : Tensor = aten::add(%x, %t, %c1)
  %m : int = aten::Int(%t)
  %out : (Tensor, int) = prim::TupleConstruct(%r, %m)
  return (%out)
"""


# --------------------------------------------------------------------------- strings


def str_format_fstring(n: int, x: float):
    return f"n={n} x={x}", f"{n}-{n + 1}", str(n)


def str_format_tensor(x: torch.Tensor):
    return f"{x}"


def str_split_join(s: str):
    parts = s.split(",")
    return parts, "|".join(parts), len(parts)


def str_methods(s: str):
    return s.upper(), s.lower(), s.startswith("ab"), s.endswith("z"), s.strip(), \
        s.replace("a", "A"), s.find("b")


def str_concat_and_compare(a: str, b: str):
    c = a + "_" + b
    return c, a == b, a < b, len(c), a in c


def str_index_slice(s: str):
    return s[0], s[-1], s[1:3]


def str_isdigit_branch(s: str):
    if s.isdigit():
        return int(s) * 2
    return -1


def str_in_list_of_ops(x: torch.Tensor, op: str):
    if op == "relu":
        return torch.relu(x)
    elif op == "neg":
        return -x
    return x


# --------------------------------------------------------------------------- Optional, isinstance


def optional_is_none(x: torch.Tensor, y: torch.Tensor | None):
    if y is None:
        return x
    return x + y


def optional_is_not_none_int(n: int | None):
    if n is not None:
        return n * 2
    return -1


def optional_annotate(x: torch.Tensor, flag: bool):
    y = torch.jit.annotate(torch.Tensor | None, None)
    if flag:
        y = x * 2
    if y is not None:
        return y + 1
    return x


def annotate_empty_list(n: int):
    xs = torch.jit.annotate(list[int], [])
    for i in range(n):
        xs.append(i)
    return xs


def optional_unwrap_with_assert(x: torch.Tensor, y: torch.Tensor | None):
    assert y is not None
    return x * y


def isinstance_union(x: int | torch.Tensor):
    if isinstance(x, int):
        return torch.tensor(x)
    return x * 2


def isinstance_optional(x: torch.Tensor | None):
    return isinstance(x, torch.Tensor), x is None


def isinstance_static(x: torch.Tensor, n: int):
    return isinstance(x, torch.Tensor), isinstance(n, float), isinstance(n, int)


def optional_tuple_return(x: torch.Tensor, k: int) -> tuple[torch.Tensor | None, int]:
    if k > 0:
        return x * k, k
    return None, k


def str_format_int_list(xs: list[int]):
    return f"{xs}"


def large_int_arith(a: int, b: int):
    return a * b, a + b


FN_CASES = [
    (int_arith, [7, 3], [-2, 5]),
    (int_floordiv_mod, [-7, 2], [7, -3]),
    (float_floordiv_mod, [-7.5, 2.0], [7.5, -2.0]),
    (true_division, [7, 2], [-3, 4]),
    (int_pow, [2, 3], [2, -2]),
    (float_pow, [1.5, -2.0], [4.0, 0.5]),
    (mixed_int_float, [3, 1.5], [-2, 0.25]),
    (comparisons, [1, 2], [3, 3]),
    (chained_comparison, [1, 2, 2], [3, 1, 2]),
    (boolean_logic, [True, False, True], [False, True, False]),
    (bool_short_circuit, [[1, 2], 5], [[1, -2], 1]),
    (min_max_scalars, [3, 5, 1.5, -1.0], [-4, -9, 0.0, 0.0]),
    (abs_scalars, [-3, -2.5], [4, 0.5]),
    (divmod_ints, [7, 3], [-7, 3]),
    (divmod_by_zero, [7, 2], [7, 0]),
    (scalar_item_arith, [torch.tensor(-7), 2], [torch.tensor(-7.5), 2]),
    (scalar_item_arith, [torch.tensor(7.0), 0], [torch.tensor(3), -2]),
    (float_pow, [10.0, 400.0], [-10.0, 401.0]),
    (int_division_by_zero, [7, 2], [7, 0]),
    (float_modulo_by_zero, [7.5, 2.0], [-7.5, 0.0]),
    (true_division_by_zero, [7, 2], [1, 0]),
    (float_division_by_zero, [1.0, 2.0], [1.0, 0.0]),
    (float_floordiv_by_zero, [5.0, 2.0], [5.0, 0.0]),
    (augmented_assignment, [5], [-8]),
    (int_bitwise, [12, 10], [-5, 3]),
    (float_special_values, [1.0], [float("nan")]),
    (round_floats, [2.5], [-1.5]),
    (math_functions, [2.0], [0.5]),
    (math_constants, [1.0], [-2.0]),
    (math_int_functions, [12, 18], [-7, 5]),
    (math_sqrt_negative, [4.0], [-1.0]),
    (math_floor_ceil_negative, [-2.5], [2.5]),
    (int_of_tensor, [torch.tensor(3.7)], [torch.tensor(-2)]),
    (float_of_tensor, [torch.tensor(3)], [torch.tensor([1.5])]),
    (bool_of_tensor, [torch.tensor(0.5)], [torch.tensor(0)]),
    (int_of_float, [3.7], [-0.5]),
    (float_of_int_bool, [3, True], [0, False]),
    (int_float_of_str, ["12"], ["-3"]),
    (float_edge_semantics, [1.0, 0.1], [-1e-20, 1.0]),
    (float_edge_semantics, [-8.0, float("nan")], [5.0, float("inf")]),
    (bool_of_multi_element_tensor, [torch.tensor([1.0])], [r(3)]),
    (item_values, [torch.tensor(2.5), torch.tensor(7)], [torch.tensor([1.0]), torch.tensor(True)]),
    (item_in_arithmetic, [r(3)], [r(2, 2)]),
    (size_dim_numel, [r(2, 3)], [r(4, 1, 5)]),
    (shape_index, [r(2, 3)], [r(5)]),
    (len_of_tensor, [r(3, 2)], [r(1)]),
    (size_of_zero_dim_raises, [r(3)], [torch.tensor(1.0)]),
    (size_arith_into_view, [r(2, 3)], [r(4, 2, 2)]),
    (dtype_and_device, [r(2)], [torch.arange(3)]),
    (scalar_type_arg, [r(2)], [torch.arange(3)]),
    (tensor_of_int, [3], [-1]),
    (tensor_plus_size, [r(2, 3)], [r(5)]),
    (str_format_fstring, [3, 0.5], [-10, 1e-3]),
    (str_format_tensor, [torch.tensor([1.0, 2.0])], [torch.arange(3)]),
    (str_split_join, ["a,b,c"], ["single"]),
    (str_methods, ["  abcz "], ["abz"]),
    (str_concat_and_compare, ["ab", "cd"], ["x", "x"]),
    (str_index_slice, ["hello"], ["ab"]),
    (str_isdigit_branch, ["42"], ["4a"]),
    (str_in_list_of_ops, [r(3), "relu"], [r(2), "neg"]),
    (optional_is_none, [r(2), None], [r(3), r(3)]),
    (optional_is_not_none_int, [3], [None]),
    (optional_annotate, [r(2), True], [r(3), False]),
    (annotate_empty_list, [3], [0]),
    (optional_unwrap_with_assert, [r(2), r(2)], [r(3), None]),
    (isinstance_union, [3], [r(2)]),
    (isinstance_optional, [r(2)], [None]),
    (isinstance_static, [r(1), 1], [r(2), 2]),
    (optional_tuple_return, [r(2), 3], [r(3), 0]),
    (str_format_int_list, [[1, 2]], [[]]),
    (large_int_arith, [2 ** 40, 2 ** 30], [2 ** 62, 4]),
]


@pytest.mark.parametrize("fn,inputs,second",
                         [pytest.param(fn, a, b, id=fn.__name__) for fn, a, b in FN_CASES])
def test_scalar_functions(fn, inputs, second):
    check(fn, inputs, second)


def test_num_to_tensor_ir():
    check(NUM_TO_TENSOR_IR, [r(3, 2)], [r(5)])


def test_scalar_kwargs_and_defaults():
    def f(x: torch.Tensor, scale: float = 2.0, shift: int = 1, name: str = "a"):
        if name == "b":
            return x * scale - shift
        return x * scale + shift

    check(f, [r(3)], [r(2, 2)])
    check(f, [r(3)], [r(2, 2)], kwargs={"shift": -4, "name": "b"})
    check(f, [r(3), 0.5], [r(1), 3.0], kwargs={"name": "b"})


def test_optional_default_none_via_kwargs():
    def f(x: torch.Tensor, bias: torch.Tensor | None = None, k: int | None = None):
        y = x if bias is None else x + bias
        if k is not None:
            y = y * k
        return y

    check(f, [r(3)], [r(2)])
    check(f, [r(3)], [r(2)], kwargs={"k": 3})
    check(f, [r(3)], [r(3)], kwargs={"bias": torch.ones(3), "k": -1})


def test_integer_power_to_an_integer_is_an_int_in_int64():
    # aten::pow.int_to_int (what an exported size squared becomes): an int — PyTorch's
    # Python binding of it hands back a float — wrapping as int64 arithmetic does; a
    # negative exponent raises as TorchScript's does.
    from static_runtime.ops.native.scalars import _int_pow

    assert _int_pow(5, 2) == 25 and type(_int_pow(5, 2)) is int
    assert _int_pow(-3, 3) == -27 and _int_pow(7, 0) == 1
    assert _int_pow(2, 63) == -(2 ** 63) and _int_pow(3, 1000) == (
        (3 ** 1000 + 2 ** 63) % 2 ** 64 - 2 ** 63)
    with pytest.raises(RuntimeError, match="negative integer powers"):
        _int_pow(2, -1)
