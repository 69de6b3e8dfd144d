"""Tensor creation: zeros/ones/full/empty-then-fill with shapes taken from the inputs, the
``*_like`` and ``new_*`` forms with and without dtype, arange/linspace/eye, tensors from
lists. Nothing random reaches an output."""


import pytest
import torch
from differential import check
from op_cases import Inputs, case, ts

I = Inputs(7)
randn, randint = I.randn, I.randint


def zeros_from_shape(x: torch.Tensor) -> torch.Tensor:
    return torch.zeros(x.shape) + x


def zeros_sizes(x: torch.Tensor) -> torch.Tensor:
    return torch.zeros(x.size(0), 2, dtype=torch.int64)


def ones_list(shape: list[int]) -> torch.Tensor:
    return torch.ones(shape, dtype=torch.float64)


def full_value(x: torch.Tensor, v: float) -> torch.Tensor:
    return torch.full([x.size(0), x.size(1)], v)


def full_int(n: int) -> torch.Tensor:
    return torch.full([n], 7, dtype=torch.int32)


def empty_then_fill(x: torch.Tensor) -> torch.Tensor:
    y = torch.empty_like(x)
    y.fill_(3.5)
    return y * x


def empty_then_copy(x: torch.Tensor) -> torch.Tensor:
    y = torch.empty(x.shape, dtype=x.dtype)
    y.copy_(x * 2)
    return y


def empty_then_zero(n: int) -> torch.Tensor:
    y = torch.empty([n, 2])
    y.zero_()
    return y


def accumulate_into_zeros(x: torch.Tensor) -> torch.Tensor:
    acc = torch.zeros_like(x[0])
    for i in range(x.size(0)):
        acc += x[i]
    return acc


def arange_int(n: int) -> torch.Tensor:
    return torch.arange(n)


def arange_start_end_step(a: int, b: int, s: int) -> torch.Tensor:
    return torch.arange(a, b, s)


def arange_float(a: float, b: float) -> torch.Tensor:
    return torch.arange(a, b, 0.5)


def arange_dtype(x: torch.Tensor) -> torch.Tensor:
    return torch.arange(x.size(-1), dtype=torch.float32) * x


def positions(x: torch.Tensor) -> torch.Tensor:
    t = x.size(1)
    pos = torch.arange(0, t, dtype=torch.long).unsqueeze(0)
    return pos.expand(x.size(0), t) + x


def linspace(n: int) -> torch.Tensor:
    return torch.linspace(0.0, 1.0, n)


def linspace_params(a: float, b: float, n: int) -> torch.Tensor:
    return torch.linspace(a, b, steps=n, dtype=torch.float64)


def eye(n: int) -> torch.Tensor:
    return torch.eye(n)


def eye_rect(x: torch.Tensor) -> torch.Tensor:
    return torch.eye(x.size(0), x.size(1), dtype=torch.int64) + x


def tensor_from_list() -> torch.Tensor:
    return torch.tensor([1, 2])


def tensor_from_list_param(xs: list[float]) -> torch.Tensor:
    return torch.tensor(xs)


def tensor_from_nested(a: int, b: int) -> torch.Tensor:
    return torch.tensor([[a, b], [b, a]], dtype=torch.float32)


def tensor_from_scalar(x: torch.Tensor, s: float) -> torch.Tensor:
    return x + torch.tensor(s)


def as_tensor(xs: list[int]) -> torch.Tensor:
    return torch.as_tensor(xs) * 2


def scalar_tensor(x: torch.Tensor) -> torch.Tensor:
    return torch.scalar_tensor(x.size(0)) + x


def causal_mask(x: torch.Tensor) -> torch.Tensor:
    t = x.size(-1)
    m = torch.full([t, t], float("-inf")).triu(1)
    return x + m


def constant_tensor_output(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    c = torch.ones(3)
    return c, x + c.sum()


def randn_unused(x: torch.Tensor) -> torch.Tensor:
    # a random op whose result is only used for its shape
    r = torch.randn(x.shape)
    return torch.zeros_like(r) + x


CASES = [
    case("zeros_from_shape", zeros_from_shape, [randn(3, 4)], [randn(2, 5, 1)]),
    case("zeros_sizes_dtype", zeros_sizes, [randn(3, 4)], [randn(5, 1)]),
    case("zeros_literal", ts("x", "torch.zeros(2, 3) + x"), [randn(2, 3)], [randn(3)]),
    case("ones_list", ones_list, [[2, 3]], [[4]]),
    case("ones_shape_of_input", ts("x", "torch.ones(x.size(), dtype=torch.int32)"),
         [randn(3, 4)], [randn(5)]),
    case("full_value", full_value, [randn(3, 4), 1.5], [randn(2, 5), -2.0]),
    case("full_int", full_int, [3], [6]),
    case("full_bool", ts("n: int", "torch.full([n, 2], True)"), [3], [1]),
    case("empty_then_fill", empty_then_fill, [randn(3, 4)], [randn(5)]),
    case("empty_then_copy", empty_then_copy, [randn(3, 4)], [randint(0, 5, 2, 3)]),
    case("empty_then_zero", empty_then_zero, [3], [5]),
    case("accumulate_into_zeros", accumulate_into_zeros, [randn(3, 4)], [randn(5, 2)]),
    case("zeros_like", ts("x", "torch.zeros_like(x)"), [randn(3, 4)], [randint(0, 5, 5)]),
    case("zeros_like_dtype", ts("x", "torch.zeros_like(x, dtype=torch.int64)"),
         [randn(3, 4)], [randn(5)]),
    case("zeros_like_noncontiguous", ts("x", "torch.zeros_like(x.t()) + x.t()"),
         [randn(3, 4)], [randn(2, 5)]),
    case("ones_like", ts("x", "torch.ones_like(x) * 2"), [randn(3, 4)], [randn(5)]),
    case("ones_like_bool", ts("x", "torch.ones_like(x, dtype=torch.bool)"),
         [randn(3, 4)], [randn(5)]),
    case("full_like", ts("x", "torch.full_like(x, 7)"), [randn(3, 4)], [randint(0, 5, 5)]),
    case("full_like_dtype", ts("x, v: float", "torch.full_like(x, v, dtype=torch.float64)"),
         [randn(3, 4), 0.5], [randn(5), 2.5]),
    case("new_zeros", ts("x", "x.new_zeros([2, x.size(0)])"), [randn(3, 4)], [randn(5)]),
    case("new_ones_dtype", ts("x", "x.new_ones([3], dtype=torch.int32)"), [randn(3, 4)],
         [randn(5)]),
    case("new_full", ts("x", "x.new_full([x.size(-1)], 2.5)"), [randn(3, 4)],
         [randint(0, 5, 6)]),
    case("new_empty_fill", ts("x", """
        y = x.new_empty([2, 2])
        y.fill_(1.0)
        return y
     """), [randn(3, 4)], [randint(0, 5, 5)]),
    case("tensor_dtype_of_input", ts("x", "torch.tensor([1.0, 2.0], dtype=x.dtype) + 1"),
         [randn(3, 4)],
         [randn(5, dtype=torch.float64)]),
    case("arange_int", arange_int, [5], [9]),
    case("arange_start_end_step", arange_start_end_step, [1, 10, 3], [-4, 4, 2]),
    case("arange_float", arange_float, [0.0, 3.0], [-1.5, 1.0]),
    case("arange_dtype_shape", arange_dtype, [randn(3, 4)], [randn(2, 6)]),
    case("positions", positions, [randint(0, 5, 2, 3)], [randint(0, 5, 4, 1)]),
    case("linspace", linspace, [5], [11]),
    case("linspace_params", linspace_params, [-1.0, 1.0, 4], [0.0, 10.0, 3]),
    case("logspace", ts("n: int", "torch.logspace(0.0, 2.0, n)"), [3], [6]),
    case("eye", eye, [3], [5]),
    case("eye_rect", eye_rect, [randint(0, 5, 2, 4)], [randint(0, 5, 3, 3)]),
    case("tensor_from_list", tensor_from_list, [], []),
    case("tensor_from_list_param", tensor_from_list_param, [[1.0, 2.5]], [[3.0, 4.0, -1.0]]),
    case("tensor_from_nested", tensor_from_nested, [1, 2], [3, -4]),
    case("tensor_from_scalar", tensor_from_scalar, [randn(3, 4), 2.0], [randn(5), -1.0]),
    case("tensor_dtype", ts("a: int", "torch.tensor([a, a + 1], dtype=torch.float64)"),
         [1], [7]),
    case("as_tensor", as_tensor, [[1, 2, 3]], [[5]]),
    case("scalar_tensor", scalar_tensor, [randn(3, 4)], [randn(5)]),
    case("causal_mask", causal_mask, [randn(2, 4, 4)], [randn(3, 3)]),
    case("constant_tensor_output", constant_tensor_output, [randn(3, 4)], [randn(5)]),
    case("random_result_used_for_shape", randn_unused, [randn(3, 4)], [randn(5)]),
    case("zeros_then_index_put", ts("i", """
        y = torch.zeros([5])
        y[i] = 1.0
        return y
     """), [torch.tensor([0, 3])], [torch.tensor([4])]),
    case("one_hot_by_eye", ts("i", "torch.eye(4)[i]"), [torch.tensor([0, 3, 3])],
         [torch.tensor([[1], [2]])]),
]


@pytest.mark.parametrize("model, first, second, tol", CASES)
def test_creation(model, first, second, tol):
    check(model, first, second, **tol)
