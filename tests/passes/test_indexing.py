"""``flatten_indexing`` (``passes/indexing.py``) and ``static_runtime::index_flat``
(``ops/native/indexing.py``): indexing by constant index tensors on adjacent dimensions,
against TorchScript on two shape sets (the same values, bit for bit), and what is left
alone or runs ``aten::index`` itself."""

import pytest
import torch
from differential import check
from torch import Tensor, nn

import static_runtime as sr


def _kinds(mod: sr.StaticModule) -> list[str]:
    return [n.kind for n in mod.graph.walk()]


class Pairs(nn.Module):
    """DLRM's dot interaction: every pair's product, the strictly upper triangle gathered by
    constant row and column indices."""

    def __init__(self, n: int = 6, dtype=torch.int64):
        super().__init__()
        rows, cols = torch.triu_indices(n, n, offset=1)
        self.register_buffer("rows", rows.to(dtype))
        self.register_buffer("cols", cols.to(dtype))

    def forward(self, x: Tensor) -> Tensor:
        products = torch.bmm(x, x.transpose(1, 2))
        return products[:, self.rows, self.cols] * 2


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32])
def test_pairs_gathered_by_one_index_select(dtype):
    torch.manual_seed(0)
    mods = check(Pairs(dtype=dtype).eval(), [torch.randn(3, 6, 4)], [torch.randn(17, 6, 5)],
                 atol=0, rtol=0)
    kinds = _kinds(mods["default"])
    assert "static_runtime::index_flat" in kinds and "aten::index" not in kinds


class Forms(nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("one", torch.tensor([2, 0, -1, 2]))
        self.register_buffer("a", torch.tensor([0, -2, 1]))
        self.register_buffer("b", torch.tensor([-1, 0, 2]))

    def forward(self, x: Tensor):
        single = x[:, self.one]              # one index tensor, negative indices
        inner = x[:, :, self.a, self.b]      # two leading full slices, then two
        first = x[self.a, self.b]            # no leading slice
        apart = x[self.a, :, self.b]         # not adjacent: left to aten::index
        return single, inner, first, apart


def test_other_forms_and_negative_indices():
    torch.manual_seed(0)
    mods = check(Forms().eval(), [torch.randn(3, 4, 3, 5)], [torch.randn(4, 3, 4, 3)],
                 atol=0, rtol=0)
    kinds = _kinds(mods["default"])
    assert kinds.count("static_runtime::index_flat") == 3
    assert kinds.count("aten::index") == 1


def test_an_index_outside_a_smaller_size_raises_as_aten_index_does():
    """The linear index of (0, 5) at size 4 would be another row's element: the kernel
    checks each size's range and lets aten::index raise."""
    torch.manual_seed(0)
    model = Pairs().eval()
    mod = sr.StaticModule(torch.jit.script(model))
    x = torch.randn(2, 6, 3)
    assert torch.equal(mod(x), model(x))
    small = torch.randn(2, 4, 3)
    with pytest.raises(IndexError):
        model(small)
    with pytest.raises(IndexError):
        mod(small)
    assert torch.equal(mod(x), model(x))  # (and the size that fits still runs)


def test_a_non_contiguous_input_is_indexed_right():
    class T(nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("i", torch.tensor([1, 0, 2]))
            self.register_buffer("j", torch.tensor([0, 2, 2]))

        def forward(self, x: Tensor) -> Tensor:
            return x.transpose(1, 2)[:, self.i, self.j]

    torch.manual_seed(0)
    check(T().eval(), [torch.randn(2, 3, 3)], [torch.randn(5, 4, 3)], atol=0, rtol=0)
