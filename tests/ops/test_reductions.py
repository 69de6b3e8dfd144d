"""Reductions: full and over dims (single, several, negative), keepdim, dtype, the
value-and-index forms (max.dim, min.dim, sort-free argmax), statistics, norms, cumulative
scans and boolean reductions."""

import pytest
import torch
from differential import check
from op_cases import Inputs, case, layout, ts

I = Inputs(3)
randn, rand, randint, bools = I.randn, I.rand, I.randint, I.bools

A3, B3 = randn(3, 4, 5), randn(2, 3, 6)
A2, B2 = randn(4, 5), randn(6, 3)


def max_dim_both(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    values, indices = torch.max(x, 1)
    return values * 2, indices


def min_dim_keepdim(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    r = x.min(dim=-1, keepdim=True)
    return r.values, r.indices


def normalize(x: torch.Tensor) -> torch.Tensor:
    mean = x.mean(-1, keepdim=True)
    var = x.var(-1, keepdim=True, unbiased=False)
    return (x - mean) / torch.sqrt(var + 1e-5)


def dims_from_input(x: torch.Tensor, d: int, keep: bool) -> torch.Tensor:
    return x.sum(d, keepdim=keep) + x.amax(d, keepdim=keep)


def aminmax(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    r = torch.aminmax(x, dim=0)
    return r.min, r.max


def var_mean(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    return torch.var_mean(x, dim=1, correction=0)


def std_mean(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    return torch.std_mean(x, dim=[0, 1], keepdim=True)


def cummax(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    r = torch.cummax(x, 1)
    return r.values, r.indices


def median_dim(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    r = torch.median(x, 1)
    return r.values, r.indices


def mode_dim(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    r = torch.mode(x, -1)
    return r.values, r.indices


def kthvalue(x: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    r = torch.kthvalue(x, k, dim=-1)
    return r.values, r.indices


def chained(x: torch.Tensor) -> torch.Tensor:
    a = x.sum(-1)
    b = a.mean(0, keepdim=True)
    c = (x.amax(-1) - b).abs().max()
    return c + x.logsumexp(-1).sum()


# (name, source) applied to A3 then B3
ON_3D = [
    ("sum_all", ts("x", "x.sum()")),
    ("sum_dim", ts("x", "torch.sum(x, 1)")),
    ("sum_neg_dim_keepdim", ts("x", "torch.sum(x, -1, keepdim=True)")),
    ("sum_dims", ts("x", "torch.sum(x, [0, 2])")),
    ("sum_dtype", ts("x", "torch.sum(x, 1, dtype=torch.float64)")),
    ("sum_all_dtype", ts("x", "x.sum(dtype=torch.float64)")),
    ("sum_empty_dim_list", ts("x", "torch.sum(x, dim=[])")),
    ("mean_all", ts("x", "x.mean()")),
    ("mean_dim", ts("x", "torch.mean(x, 2)")),
    ("mean_dims_keepdim", ts("x", "torch.mean(x, [1, 2], keepdim=True)")),
    ("mean_dtype", ts("x", "torch.mean(x, [0], dtype=torch.float64)")),
    ("amax_dim", ts("x", "torch.amax(x, 1)")),
    ("amax_dims_keepdim", ts("x", "torch.amax(x, [0, -1], keepdim=True)")),
    ("amin_dim", ts("x", "x.amin(-1)")),
    ("amin_all", ts("x", "torch.amin(x)")),
    ("max_all", ts("x", "torch.max(x)")),
    ("min_all", ts("x", "x.min()")),
    ("max_dim", max_dim_both),
    ("min_dim_keepdim", min_dim_keepdim),
    ("argmax_all", ts("x", "torch.argmax(x)")),
    ("argmax_dim", ts("x", "torch.argmax(x, 1)")),
    ("argmax_keepdim", ts("x", "x.argmax(-1, keepdim=True)")),
    ("argmin_dim", ts("x", "torch.argmin(x, dim=0)")),
    ("prod_all", ts("x", "torch.prod(x)")),
    ("prod_dim", ts("x", "torch.prod(x, 1, keepdim=True)")),
    ("prod_dtype", ts("x", "torch.prod(x, -1, dtype=torch.float64)")),
    ("std_all", ts("x", "torch.std(x)")),
    ("std_dim_unbiased_false", ts("x", "torch.std(x, [1], False, True)")),
    ("std_correction", ts("x", "torch.std(x, dim=[2], correction=0)")),
    ("var_all", ts("x", "x.var()")),
    ("var_dim", ts("x", "torch.var(x, 1)")),
    ("var_dims_keepdim", ts("x", "torch.var(x, [0, 2], keepdim=True)")),
    ("var_mean", var_mean),
    ("std_mean", std_mean),
    ("norm_default", ts("x", "torch.norm(x)")),
    ("norm_p1_dim", ts("x", "torch.norm(x, 1, 1)")),
    ("norm_inf", ts("x", "torch.norm(x, float('inf'), [2])")),
    ("norm_p2_keepdim", ts("x", "x.norm(2, -1, keepdim=True)")),
    ("linalg_vector_norm", ts("x", "torch.linalg.vector_norm(x, 3.0, [0, 1])")),
    ("logsumexp", ts("x", "torch.logsumexp(x, 1)")),
    ("logsumexp_dims_keepdim", ts("x", "torch.logsumexp(x, [0, 2], keepdim=True)")),
    ("cumsum", ts("x", "torch.cumsum(x, 1)")),
    ("cumsum_neg_dtype", ts("x", "torch.cumsum(x, -1, dtype=torch.float64)")),
    ("cumprod", ts("x", "torch.cumprod(x, 0)")),
    ("cummax", cummax),
    ("logcumsumexp", ts("x", "torch.logcumsumexp(x, 2)")),
    ("median_all", ts("x", "torch.median(x)")),
    ("median_dim", median_dim),
    ("nansum", ts("x", "torch.nansum(torch.where(x > 1, x * float('nan'), x), 1)")),
    ("nanmean", ts("x", "torch.nanmean(torch.where(x > 1, x * float('nan'), x), -1)")),
    ("count_nonzero", ts("x", "torch.count_nonzero(x > 0, 1)")),
    ("aminmax", aminmax),
    ("normalize", normalize),
    ("chained", chained),
]

ON_INT_BOOL = [
    ("sum_int", ts("x", "x.sum(1)"), [randint(-9, 9, 3, 4)], [randint(-9, 9, 2, 5)]),
    ("sum_bool", ts("x", "torch.sum(x)"), [bools(3, 4)], [bools(7)]),
    ("sum_bool_dim", ts("x", "torch.sum(x, 0)"), [bools(3, 4)], [bools(5, 2)]),
    ("mean_int_dtype", ts("x", "torch.mean(x, 1, dtype=torch.float32)"),
     [randint(-9, 9, 3, 4)], [randint(-9, 9, 2, 5)]),
    ("prod_int", ts("x", "x.prod(1)"), [randint(-3, 4, 3, 4)], [randint(-3, 4, 2, 5)]),
    ("cumsum_int", ts("x", "torch.cumsum(x, 0)"), [randint(-9, 9, 3, 4)], [randint(-9, 9, 7)]),
    ("cumsum_bool", ts("x", "torch.cumsum(x, 0)"), [bools(3, 4)], [bools(6)]),
    ("argmax_int", ts("x", "torch.argmax(x, 1)"), [randint(-9, 9, 3, 4)], [randint(-9, 9, 2, 5)]),
    ("max_int", ts("x", "torch.max(x)"), [randint(-9, 9, 3, 4)], [randint(-9, 9, 5)]),
    ("mode", mode_dim, [randint(0, 3, 3, 6)], [randint(0, 3, 2, 9)]),
    ("kthvalue", kthvalue, [randn(3, 4), 2], [randn(2, 6), 5]),
    ("any_all", ts("x", "torch.any(x)"), [bools(3, 4)], [torch.zeros(5, dtype=torch.bool)]),
    ("any_dim", ts("x", "torch.any(x, 1)"), [bools(3, 4)], [bools(2, 5)]),
    ("any_dim_keepdim", ts("x", "x.any(-1, keepdim=True)"), [bools(3, 4)], [bools(5, 2)]),
    ("any_float", ts("x", "torch.any(x > 1.0)"), [randn(3, 4)], [randn(5)]),
    ("all_all", ts("x", "torch.all(x)"), [bools(3, 4)], [torch.ones(2, 2, dtype=torch.bool)]),
    ("all_dim", ts("x", "torch.all(x, 0)"), [bools(3, 4)], [bools(2, 5)]),
    ("all_int", ts("x", "torch.all(x, 1)"), [randint(0, 3, 3, 4)], [randint(0, 3, 2, 5)]),
    ("dims_from_input", dims_from_input, [randn(3, 4), 1, True], [randn(2, 3, 4), 0, False]),
    ("sum_noncontiguous", ts("x", "x.sum(0)"), [randn(4, 3).t()], [randn(5, 2).t()]),
    ("sum_dtype_from_input", ts("x, d: int", "torch.sum(x, [0], dtype=d) * 2"),
     [randn(3, 4), 6], [randn(5), 7]),
    ("cumsum_dtype_from_input", ts("x, d: int", "torch.cumsum(x, 0, dtype=d) + 1"),
     [randn(3, 4), 7], [randn(5), 6]),
    ("mean_dtype_of_other_input", ts("x, y", "torch.mean(x, [1], dtype=y.dtype) * 2"),
     [randn(3, 4), randn(1)], [randn(2, 5), randn(1, dtype=torch.float64)]),
    ("sum_empty_input", ts("x", "(x.sum(0) + 1, x.sum())"), [randn(3, 4)], [randn(0, 4)]),
    ("amax_empty_rows", ts("x", "x.amax(1) * 2"), [randn(3, 4)], [randn(0, 4)]),
    ("mean_keepdim_broadcast", ts("x", "x - x.mean([0, 1], keepdim=True)"),
     [randn(2, 3, 4)], [randn(3, 2, 1)]),
]

# The result's strides follow a transposed input, on every call (see ``op_cases.layout``).
LAYOUT = [(f"layout_{name}", layout(expr), [randn(4, 3)], [randn(6, 5)]) for name, expr in [
    ("sum_keepdim", "y.sum(0, keepdim=True)"), ("cumsum", "torch.cumsum(y, 1)"),
    ("amax_keepdim", "y.amax(1, keepdim=True)"), ("logcumsumexp", "torch.logcumsumexp(y, 0)"),
]]

CASES = ([case(name, model, [A3], [B3]) for name, model in ON_3D]
         + [case(*c) for c in ON_INT_BOOL + LAYOUT])


@pytest.mark.parametrize("model, first, second, tol", CASES)
def test_reduction(model, first, second, tol):
    check(model, first, second, **tol)
