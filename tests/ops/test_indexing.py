"""Indexing: basic slicing and select, advanced indexing with tensors, index_select, gather,
functional scatter, masked ops, nonzero, index_put on a clone, narrow, topk/sort, and
take_along_dim."""

import pytest
import torch
from differential import check
from op_cases import Inputs, case, ts

I = Inputs(5)
randn, randint, bools, perm = I.randn, I.randint, I.bools, I.perm


def slice_steps(x: torch.Tensor) -> torch.Tensor:
    return x[1:, ::2]


def slice_then_compute(x: torch.Tensor) -> torch.Tensor:
    a = x[:, 1:-1]
    b = x[:, :-2]
    return a * b + x[0:1, 2:]


def slice_params(x: torch.Tensor, start: int, end: int, step: int) -> torch.Tensor:
    return x[start:end:step] * 2


def ellipsis_none(x: torch.Tensor) -> torch.Tensor:
    return x[..., None, 0] + x[None, ..., -1:]


def select_ops(x: torch.Tensor, i: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    return x[i], x[:, -1], torch.select(x, 1, 0)


def index_tensor(x: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
    return x[idx]


def index_tensor_dim1(x: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
    return x[:, idx]


def index_two_tensors(x: torch.Tensor, i: torch.Tensor, j: torch.Tensor) -> torch.Tensor:
    return x[i, j]


def index_bool_mask(x: torch.Tensor, m: torch.Tensor) -> torch.Tensor:
    return x[m]


def index_pair_written(x: torch.Tensor, i: torch.Tensor, j: torch.Tensor
                       ) -> tuple[torch.Tensor, torch.Tensor]:
    # ``aten::index`` answers a new tensor: writing it leaves ``x`` as it was, also where an
    # index is 0-d (which ``Tensor.__getitem__`` reads as an integer and answers with a view)
    y = x[i, j]
    y.add_(1.0)
    return y, x


def index_between(x: torch.Tensor, i: torch.Tensor, j: torch.Tensor) -> torch.Tensor:
    return x[i, :, j] * 2


def index_put_tensor(x: torch.Tensor, idx: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    y = x.clone()
    y[idx] = v
    return y


def index_put_mask_scalar(x: torch.Tensor) -> torch.Tensor:
    y = x.clone()
    y[y < 0] = 0.0
    return y


def index_put_accumulate(x: torch.Tensor, idx: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    return torch.index_put(x, [idx], v, accumulate=True)


def slice_assign(x: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    y = x.clone()
    y[1:, :2] = v
    return y


def select_assign(x: torch.Tensor, i: int) -> torch.Tensor:
    y = x * 1
    y[i] = 7.0
    return y + 1


def slice_assign_then_read(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    y = x + 0
    head = y[0]
    y[0] += 1.0
    return head * 2, y


def topk(x: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    v, i = torch.topk(x, k)
    return v, i


def topk_smallest_dim0(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    r = x.topk(2, dim=0, largest=False)
    return r.values, r.indices


def sort(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    v, i = torch.sort(x)
    return v, i


def sort_descending_stable(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    v, i = torch.sort(x, dim=0, descending=True, stable=True)
    return v, i


def max_via_sort(x: torch.Tensor) -> torch.Tensor:
    return torch.sort(x, -1)[0][..., -1]


def embedding_by_index(table: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
    return table[ids].sum(1)


GATHER_IDX1 = torch.tensor([[0, 0], [1, 0], [2, 2]])
GATHER_IDX2 = torch.tensor([[1, 0, 1, 1], [0, 0, 1, 0]])

CASES = [
    case("slice_steps", slice_steps, [randn(4, 6)], [randn(3, 5, 2)]),
    case("slice_negative", ts("x", "x[-2:, :-1]"), [randn(4, 5)], [randn(3, 2)]),
    case("slice_out_of_range", ts("x", "x[1:100]"), [randn(4, 5)], [randn(2)]),
    case("slice_empty", ts("x", "x[3:1] + 1"), [randn(4, 5)], [randn(6)]),
    case("slice_then_compute", slice_then_compute, [randn(3, 5)], [randn(2, 7)]),
    case("slice_params", slice_params, [randn(8, 2), 1, 7, 2], [randn(5), -4, -1, 1]),
    case("ellipsis_none", ellipsis_none, [randn(2, 3, 4)], [randn(3, 2)]),
    case("select_ops", select_ops, [randn(3, 4), 1], [randn(5, 2, 3), -1]),
    case("select_int_scalar", ts("x", "x[0, 1].item()"), [randn(3, 4)], [randn(2, 2)]),
    case("index_tensor", index_tensor, [randn(5, 3), torch.tensor([4, 0, 0, 2])],
         [randn(7), torch.tensor([[1, 6], [3, 3]])]),
    case("index_tensor_negative", index_tensor, [randn(5, 3), torch.tensor([-1, -5])],
         [randn(2, 2), torch.tensor([-2, 1, 0])]),
    # x[idx] by a computed index runs index_select where that is the same (ops/selection.py):
    # int32 indices, a strided x, an index of rank 2, and a negative index among others
    case("index_tensor_int32_and_strided", index_tensor,
         [randn(6, 4), torch.tensor([5, 0, 2], dtype=torch.int32)],
         [randn(3, 6).t(), torch.tensor([1, 5], dtype=torch.int32)]),
    case("index_tensor_rows_then_negative", index_tensor,
         [randn(6, 2, 3), torch.tensor([0, 3, 3, 5])],
         [randn(6, 2, 3), torch.tensor([2, -1, 0])]),
    case("index_tensor_dim1", index_tensor_dim1, [randn(3, 5), torch.tensor([4, 1])],
         [randn(2, 3, 2), torch.tensor([2, 2, 0])]),
    case("index_two_tensors", index_two_tensors,
         [randn(4, 5), torch.tensor([0, 3, 1]), torch.tensor([4, 0, 2])],
         [randn(3, 3, 2), torch.tensor([[0], [2]]), torch.tensor([1, 2])]),
    case("index_bool_mask", index_bool_mask, [randn(3, 4), bools(3, 4)], [randn(5, 2), bools(5)]),
    # x[i, j] by indices computed at run time: Tensor.__getitem__ where every index is a
    # tensor of rank >= 1 (int64, int32, bool), aten::index otherwise (ops/selection.py)
    case("index_pair_written", index_pair_written,
         [randn(4, 5), torch.tensor([0, 3, -1]), torch.tensor([4, 0, 2], dtype=torch.int32)],
         [randn(3, 3, 2), torch.tensor(2), torch.tensor(1)]),
    case("index_pair_bool_and_empty", index_two_tensors,
         [randn(3, 4), bools(3), torch.tensor([1, 0, 3, 2])[:0]],
         [randn(2, 2, 5), torch.tensor([True, False]), torch.tensor([[1], [0]])]),
    case("index_pair_past_the_end_raises", index_two_tensors,
         [randn(3, 4), torch.tensor([0, 1]), torch.tensor([4, 0])],
         [randn(3, 4), torch.tensor([2]), torch.tensor([3])]),
    case("index_between", index_between,
         [randn(3, 2, 4), torch.tensor([2, 0]), torch.tensor([3, 3])],
         [randn(2, 5, 3), torch.tensor([[1, 0]]), torch.tensor([2])]),
    case("index_out_of_range_raises", index_tensor, [randn(3), torch.tensor([5])],
         [randn(2, 2), torch.tensor([1])]),
    case("index_select", ts("x, i", "torch.index_select(x, 1, i)"),
         [randn(3, 5), torch.tensor([0, 4, 4])], [randn(2, 6, 2), torch.tensor([5])]),
    case("index_select_dim0_int32", ts("x, i", "x.index_select(0, i)"),
         [randn(5, 3), torch.tensor([1, 0], dtype=torch.int32)],
         [randn(4), torch.tensor([3, 3, 1], dtype=torch.int32)]),
    case("gather", ts("x, i", "torch.gather(x, 1, i)"), [randn(3, 4), GATHER_IDX1],
         [randn(2, 2), GATHER_IDX2[:, :2]]),
    case("gather_dim0", ts("x, i", "torch.gather(x, 0, i)"), [randn(2, 4), GATHER_IDX2],
         [randn(3, 3), GATHER_IDX1]),
    case("scatter_src", ts("x, i, s", "torch.scatter(x, 1, i, s)"),
         [torch.zeros(3, 4), GATHER_IDX1, randn(3, 2)],
         [torch.zeros(2, 3), GATHER_IDX2[:, :3], randn(2, 3)]),
    case("scatter_value", ts("x, i", "x.scatter(0, i, 1.5)"), [randn(2, 4), GATHER_IDX2],
         [randn(3, 3), GATHER_IDX1]),
    case("scatter_reduce_add", ts("x, i, s", "torch.scatter_add(x, 1, i, s)"),
         [torch.ones(3, 4), GATHER_IDX1, randn(3, 2)],
         [torch.ones(2, 3), GATHER_IDX2[:, :3], randn(2, 3)]),
    case("scatter_reduce_amax", ts("x, i, s",
                                   "torch.scatter_reduce(x, 1, i, s, 'amax', include_self=False)"),
         [torch.zeros(3, 4), GATHER_IDX1, randn(3, 2)],
         [torch.zeros(2, 3), GATHER_IDX2[:, :3], randn(2, 3)]),
    case("index_add", ts("x, i, s", "torch.index_add(x, 0, i, s, alpha=2)"),
         [torch.zeros(4, 3), torch.tensor([0, 3, 0]), randn(3, 3)],
         [torch.zeros(2, 5), torch.tensor([1]), randn(1, 5)]),
    case("index_copy", ts("x, i, s", "torch.index_copy(x, 1, i, s)"),
         [torch.zeros(3, 4), torch.tensor([3, 1]), randn(3, 2)],
         [torch.zeros(2, 3), torch.tensor([0, 1, 2]), randn(2, 3)]),
    case("index_fill", ts("x, i", "x.index_fill(1, i, -1.0)"),
         [randn(3, 4), torch.tensor([0, 2])], [randn(2, 5), torch.tensor([4])]),
    case("masked_fill_scalar", ts("x, m", "x.masked_fill(m, -1e9)"),
         [randn(3, 4), bools(3, 4)], [randn(2, 5), bools(5)]),
    case("masked_fill_tensor_value", ts("x, m, v", "torch.masked_fill(x, m, v)"),
         [randn(3, 4), bools(4), torch.tensor(2.0)], [randn(5), bools(5), torch.tensor(-3.0)]),
    case("masked_fill_attention", ts("s", """
        t = s.size(-1)
        mask = torch.ones(t, t, dtype=torch.bool).triu(1)
        return torch.softmax(s.masked_fill(mask, float('-inf')), -1)
     """), [randn(2, 4, 4)], [randn(1, 6, 6)]),
    case("masked_select", ts("x, m", "torch.masked_select(x, m)"),
         [randn(3, 4), bools(3, 4)], [randn(2, 5), bools(1, 5)]),
    case("masked_scatter", ts("x, m, s", "x.masked_scatter(m, s)"),
         [randn(3, 4), bools(3, 4), randn(12)], [randn(5), bools(5), randn(6)]),
    case("nonzero", ts("x", "torch.nonzero(x)"), [randint(0, 2, 3, 4)], [randint(0, 2, 7)]),
    case("nonzero_unbind", ts("x", "torch.nonzero(x > 0).unbind(1)"),
         [randn(3, 4)], [randn(2, 3, 2)]),
    case("argwhere", ts("x", "torch.argwhere(x)"), [bools(3, 4)], [bools(5)]),
    case("where_single_arg", ts("x", "torch.where(x)"), [bools(3, 4)], [bools(2, 2, 2)]),
    case("index_put_tensor", index_put_tensor, [randn(5, 3), torch.tensor([0, 3]), randn(2, 3)],
         [randn(4), torch.tensor([1, 2, 3]), randn(3)]),
    case("index_put_broadcast_value", index_put_tensor,
         [randn(5, 3), torch.tensor([4, 1]), torch.tensor(9.0)],
         [randn(3, 2, 2), torch.tensor([0]), randn(2)]),
    case("index_put_mask_scalar", index_put_mask_scalar, [randn(3, 4)], [randn(6)]),
    case("index_put_accumulate", index_put_accumulate,
         [torch.zeros(4, 2), torch.tensor([0, 0, 3]), randn(3, 2)],
         [torch.zeros(3), torch.tensor([1, 1]), randn(2)]),
    case("slice_assign", slice_assign, [randn(3, 4), randn(2, 2)], [randn(5, 2), randn(4, 2)]),
    case("select_assign", select_assign, [randn(3, 4), 1], [randn(5), -1]),
    case("slice_assign_then_read", slice_assign_then_read, [randn(3, 4)], [randn(2, 5)]),
    case("narrow", ts("x", "x.narrow(1, 1, 2)"), [randn(3, 4)], [randn(2, 5, 2)]),
    case("narrow_param", ts("x, s: int, n: int", "torch.narrow(x, 0, s, n) * 2"),
         [randn(5, 3), 1, 3], [randn(4), 0, 4]),
    case("topk", topk, [randn(3, 6), 2], [randn(2, 4, 5), 5]),
    case("topk_smallest_dim0", topk_smallest_dim0, [randn(3, 4)], [randn(5, 2)]),
    case("sort", sort, [randn(3, 6)], [randn(2, 4, 5)]),
    case("sort_descending_stable", sort_descending_stable, [randint(0, 3, 6, 2)],
         [randint(0, 3, 4)]),
    case("argsort", ts("x", "torch.argsort(x, dim=-1, descending=True)"),
         [randn(3, 6)], [randn(7)]),
    case("max_via_sort", max_via_sort, [randn(3, 6)], [randn(2, 2, 4)]),
    case("take_along_dim", ts("x, i", "torch.take_along_dim(x, i, 1)"),
         [randn(3, 4), GATHER_IDX1], [randn(2, 2), GATHER_IDX2[:, :2]]),
    case("take_along_dim_argsort", ts("x", "torch.take_along_dim(x, x.argsort(0), 0)"),
         [randn(3, 4)], [randn(5, 2)]),
    case("take", ts("x, i", "torch.take(x, i)"), [randn(3, 4), torch.tensor([0, 11, 5])],
         [randn(2), torch.tensor([[1, 0], [0, 1]])]),
    case("embedding_by_index", embedding_by_index,
         [randn(10, 4), randint(0, 10, 2, 3)], [randn(6, 3), randint(0, 6, 5, 2)]),
    case("index_with_perm", index_tensor, [randn(6, 2), perm(6)], [randn(4, 3), perm(4)]),
    case("unique_sorted", ts("x", "torch.unique(x, sorted=True)"),
         [randint(0, 5, 3, 4)], [randint(0, 3, 6)]),
    case("searchsorted", ts("s, v", "torch.searchsorted(s, v)"),
         [torch.tensor([1.0, 3.0, 5.0, 7.0]), randn(3) * 4], [torch.tensor([0.0, 1.0]), randn(5)]),
    case("bucketize", ts("v, b", "torch.bucketize(v, b, right=True)"),
         [randn(3, 4), torch.tensor([-1.0, 0.0, 1.0])], [randn(5), torch.tensor([0.5])]),
]


@pytest.mark.parametrize("model, first, second, tol", CASES)
def test_indexing(model, first, second, tol):
    check(model, first, second, **tol)
