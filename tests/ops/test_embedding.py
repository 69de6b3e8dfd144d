"""Embeddings: ``F.embedding`` (padding_idx, max_norm-free), embedding bags in sum/mean/max
mode with offsets, per-sample weights and 2-D inputs, ``F.one_hot``, and the patterns
recommendation models build from them."""

import warnings

import pytest
import torch
import torch.nn.functional as F
from differential import check
from op_cases import Inputs, case

import static_runtime as sr

I = Inputs(8)
randn, randint = I.randn, I.randint


class Bag(torch.nn.Module):
    def __init__(self, mode: str, padding_idx: int | None = None):
        super().__init__()
        self.bag = torch.nn.EmbeddingBag(10, 4, mode=mode, padding_idx=padding_idx)
        with torch.no_grad():
            self.bag.weight.copy_(torch.randn(10, 4, generator=torch.Generator().manual_seed(1)))

    def forward(self, ids: torch.Tensor, offsets: torch.Tensor) -> torch.Tensor:
        return self.bag(ids, offsets)


class WeightedBag(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.bag = torch.nn.EmbeddingBag(10, 3, mode="sum")
        with torch.no_grad():
            self.bag.weight.copy_(torch.randn(10, 3, generator=torch.Generator().manual_seed(2)))

    def forward(self, ids: torch.Tensor, offsets: torch.Tensor,
                w: torch.Tensor) -> torch.Tensor:
        return self.bag(ids, offsets, per_sample_weights=w)


class Tables(torch.nn.Module):
    """A small DLRM-like sparse arch: several bags, concatenated with dense features."""

    def __init__(self):
        super().__init__()
        g = torch.Generator().manual_seed(3)
        self.bags = torch.nn.ModuleList([torch.nn.EmbeddingBag(8, 4, mode="sum")
                                         for _ in range(3)])
        with torch.no_grad():
            for b in self.bags:
                b.weight.copy_(torch.randn(8, 4, generator=g))

    def forward(self, dense: torch.Tensor, ids: list[torch.Tensor],
                offsets: list[torch.Tensor]) -> torch.Tensor:
        pooled = [dense]
        for i, bag in enumerate(self.bags):
            pooled.append(bag(ids[i], offsets[i]))
        return torch.cat(pooled, 1)


def embedding(w: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
    return F.embedding(ids, w)


def embedding_padding(w: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
    return F.embedding(ids, w, padding_idx=0)


def embedding_then_mean(w: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
    return F.embedding(ids, w).mean(1)


def embedding_bag_sum(w: torch.Tensor, ids: torch.Tensor, offsets: torch.Tensor) -> torch.Tensor:
    return F.embedding_bag(ids, w, offsets, mode="sum")


def embedding_bag_mean(w: torch.Tensor, ids: torch.Tensor,
                       offsets: torch.Tensor) -> torch.Tensor:
    return F.embedding_bag(ids, w, offsets, mode="mean")


def embedding_bag_max(w: torch.Tensor, ids: torch.Tensor, offsets: torch.Tensor) -> torch.Tensor:
    return F.embedding_bag(ids, w, offsets, mode="max")


def embedding_bag_weighted(w: torch.Tensor, ids: torch.Tensor, offsets: torch.Tensor,
                           psw: torch.Tensor) -> torch.Tensor:
    return F.embedding_bag(ids, w, offsets, mode="sum", per_sample_weights=psw)


def embedding_bag_2d(w: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
    return F.embedding_bag(ids, w, mode="mean")


def embedding_bag_include_last(w: torch.Tensor, ids: torch.Tensor,
                               offsets: torch.Tensor) -> torch.Tensor:
    return F.embedding_bag(ids, w, offsets, mode="sum", include_last_offset=True)


def embedding_bag_aten(w: torch.Tensor, ids: torch.Tensor,
                       offsets: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    out, _offset2bag, _bag_size, max_indices = torch.embedding_bag(
        w, ids, offsets, False, 2, False, None, False)
    return out, max_indices


def embedding_bag_aten_mode(w: torch.Tensor, ids: torch.Tensor, offsets: torch.Tensor,
                            mode: int) -> torch.Tensor:
    # aten::embedding_bag directly: 0 sum, 1 mean, 2 max
    return torch.embedding_bag(w, ids, offsets, False, mode, False, None, False)[0]


def embedding_bag_aten_weighted(w: torch.Tensor, ids: torch.Tensor, offsets: torch.Tensor,
                                psw: torch.Tensor) -> torch.Tensor:
    return torch.embedding_bag(w, ids, offsets, False, 0, False, psw, True)[0]


def embedding_bag_aten_padding_idx(w: torch.Tensor, ids: torch.Tensor,
                                   offsets: torch.Tensor) -> torch.Tensor:
    return torch.embedding_bag(w, ids, offsets, False, 1, False, None, False, 1)[0]


def one_hot(ids: torch.Tensor) -> torch.Tensor:
    return F.one_hot(ids, 5)


def one_hot_inferred(ids: torch.Tensor) -> torch.Tensor:
    return F.one_hot(ids)


def one_hot_float_matmul(ids: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return F.one_hot(ids, w.size(0)).to(w.dtype) @ w


W1, W2 = randn(10, 4), randn(7, 3)
IDS1, IDS2 = torch.tensor([1, 2, 4, 5, 4, 3, 2, 9]), torch.tensor([0, 6, 6, 1, 2])
OFF1, OFF2 = torch.tensor([0, 4]), torch.tensor([0, 1, 1, 3])  # the second has an empty bag
PSW1, PSW2 = randn(8), randn(5)

CASES = [
    case("embedding_1d", embedding, [W1, IDS1], [W2, IDS2]),
    case("embedding_2d_ids", embedding, [W1, randint(0, 10, 2, 3)], [W2, randint(0, 7, 4, 1)]),
    case("embedding_padding_idx", embedding_padding, [W1, torch.tensor([[0, 2], [3, 0]])],
         [W2, torch.tensor([0, 0, 5])]),
    case("embedding_then_mean", embedding_then_mean, [W1, randint(0, 10, 3, 4)],
         [W2, randint(0, 7, 2, 2)]),
    case("embedding_int32_ids", embedding, [W1, torch.tensor([3, 1], dtype=torch.int32)],
         [W2, torch.tensor([[6, 0, 2]], dtype=torch.int32)]),
    case("embedding_bag_sum", embedding_bag_sum, [W1, IDS1, OFF1], [W2, IDS2, OFF2]),
    case("embedding_bag_mean", embedding_bag_mean, [W1, IDS1, OFF1], [W2, IDS2, OFF2]),
    case("embedding_bag_max", embedding_bag_max, [W1, IDS1, OFF1], [W2, IDS2, OFF2]),
    case("embedding_bag_per_sample_weights", embedding_bag_weighted,
         [W1, IDS1, OFF1, PSW1], [W2, IDS2, OFF2, PSW2]),
    case("embedding_bag_2d_input", embedding_bag_2d, [W1, randint(0, 10, 3, 2)],
         [W2, randint(0, 7, 2, 5)]),
    case("embedding_bag_include_last_offset", embedding_bag_include_last,
         [W1, IDS1, torch.tensor([0, 3, 8])], [W2, IDS2, torch.tensor([0, 2, 2, 5])]),
    case("embedding_bag_aten_max_indices", embedding_bag_aten, [W1, IDS1, OFF1],
         [W2, IDS2, OFF2]),
    case("embedding_bag_aten_sum", embedding_bag_aten_mode, [W1, IDS1, OFF1, 0],
         [W2, IDS2, OFF2, 0]),
    case("embedding_bag_aten_mean", embedding_bag_aten_mode, [W1, IDS1, OFF1, 1],
         [W2, IDS2, OFF2, 1]),
    case("embedding_bag_aten_max", embedding_bag_aten_mode, [W1, IDS1, OFF1, 2],
         [W2, IDS2, OFF2, 2]),
    case("embedding_bag_aten_weighted_last_offset", embedding_bag_aten_weighted,
         [W1, IDS1, torch.tensor([0, 3, 8]), PSW1], [W2, IDS2, torch.tensor([0, 2, 2, 5]), PSW2]),
    case("embedding_bag_aten_padding_idx", embedding_bag_aten_padding_idx, [W1, IDS1, OFF1],
         [W2, IDS2, OFF2]),
    case("module_bag_sum", Bag("sum"), [IDS1, OFF1], [IDS2, OFF2]),
    case("module_bag_mean", Bag("mean"), [IDS1, OFF1], [IDS2, OFF2]),
    case("module_bag_max", Bag("max"), [IDS1, OFF1], [IDS2, OFF2]),
    case("module_bag_padding_idx", Bag("sum", padding_idx=2), [IDS1, OFF1], [IDS2, OFF2]),
    case("module_bag_weighted", WeightedBag(), [IDS1, OFF1, PSW1], [IDS2, OFF2, PSW2]),
    case("module_tables", Tables(),
         [randn(2, 3), [randint(0, 8, 5), randint(0, 8, 3), randint(0, 8, 2)],
          [torch.tensor([0, 2]), torch.tensor([0, 1]), torch.tensor([0, 1])]],
         [randn(3, 1), [randint(0, 8, 3), randint(0, 8, 6), randint(0, 8, 4)],
          [torch.tensor([0, 1, 2]), torch.tensor([0, 0, 3]), torch.tensor([0, 2, 4])]]),
    case("one_hot", one_hot, [torch.tensor([0, 4, 2])], [torch.tensor([[1, 1], [3, 0]])]),
    case("one_hot_inferred_classes", one_hot_inferred, [torch.tensor([0, 4, 2])],
         [torch.tensor([1, 1])]),
    case("one_hot_float_matmul", one_hot_float_matmul, [torch.tensor([0, 4, 2]), W1],
         [torch.tensor([[1, 6]]), W2]),
]


@pytest.mark.parametrize("model, first, second, tol", CASES)
def test_embedding(model, first, second, tol):
    check(model, first, second, **tol)


# --------------------------------------------------------------------------- the out variant


class Lookup(torch.nn.Module):
    """An embedding whose result stays inside the graph, so it is written into the arena."""

    def __init__(self, padding_idx: int | None = None):
        super().__init__()
        self.emb = torch.nn.Embedding(20, 6, padding_idx=padding_idx)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.emb(ids) * 2


def _embedding_line(mod) -> str:
    return next(ln for ln in mod.describe().splitlines() if ln.startswith("aten::embedding"))


@pytest.mark.parametrize("padding_idx", [None, 3])
def test_embedding_writes_into_the_arena_with_index_select(padding_idx):
    ids = torch.tensor([[1, 3, 19], [0, 3, 7]])
    mods = check(Lookup(padding_idx), [ids], [torch.tensor([4, 5, 3, 3, 0])], rtol=0, atol=0)
    line = _embedding_line(mods["default"])
    assert "index_select" in line and "[managed]" in line


def test_embedding_out_variant_other_indices():
    model = Lookup()
    # int32, 0-dim, 3-D, non-contiguous (transposed) and empty indices
    check(model, [torch.tensor([[2, 9], [4, 1]], dtype=torch.int32)], [torch.tensor(5)],
          rtol=0, atol=0)
    check(model, [torch.randint(0, 20, (2, 3, 4))],
          [torch.randint(0, 20, (4, 3)).t()], rtol=0, atol=0)
    check(model, [torch.zeros(0, 3, dtype=torch.long)], [torch.tensor([1])], rtol=0, atol=0)
    # an index out of range raises in both
    check(model, [torch.tensor([1, 20])], [torch.tensor([-21])])


def test_embedding_of_a_weight_given_as_input():
    src = """
def f(w: torch.Tensor, ids: torch.Tensor):
    return torch.embedding(w, ids) + 1
"""
    check(src, [randn(7, 3), torch.tensor([[0, 6], [2, 2]])],
          [randn(4, 5), torch.tensor([3, 1, 0])], rtol=0, atol=0)


def test_embedding_out_fn_takes_the_wrapper_when_the_planned_tensor_does_not_fit():
    mod = sr.StaticModule(torch.jit.script(Lookup()))
    ids = torch.tensor([[1, 2], [3, 4]])
    mod(ids)
    mod(ids)
    out_fn = next(pn.impl.out_fn for pn in mod.plan.nodes() if pn.kind == "aten::embedding")
    w = torch.randn(20, 6)
    out = torch.empty(2, 2, 6)
    for _ in range(2):  # the second call reuses the flat view made by the first
        assert out_fn(out, w, ids, -1, False, False) is out
        torch.testing.assert_close(out, F.embedding(ids, w), rtol=0, atol=0)
    # the same tensor with a weight of another width: not shrunk in silence
    wide = torch.randn(20, 3)
    result = out_fn(out, wide, ids, -1, False, False)
    torch.testing.assert_close(result, F.embedding(ids, wide), rtol=0, atol=0)
    # another number of indices: the wrapper resizes
    more = torch.tensor([1, 2, 3])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        result = out_fn(torch.empty(2, 2, 6), w, more, -1, False, False)
    torch.testing.assert_close(result, F.embedding(more, w), rtol=0, atol=0)
