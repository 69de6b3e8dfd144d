"""``fuse_scaled_index_add`` (``passes/scatter.py``) and the node it makes (``ops/scatter.py``):
a mixture of experts' weighted scatter-add ``out.index_add_(0, rows, y * w.unsqueeze(-1))``
becomes one node whose kernel is measured; with either kernel forced it equals TorchScript on
two shape sets (experts that get no token included), an index out of range raises as ATen
does, near misses are left alone, and without measured kernels nothing is fused."""

import pytest
import torch
from differential import check, script
from measured import MEASURE, OPTIONS, fresh_kernel_cache, needs_ckernels  # noqa: F401
from passes_helpers import kinds
from torch import Tensor, nn

import static_runtime as sr
from static_runtime.ops.kernels import Choice, KernelChooser

pytestmark = needs_ckernels

FUSED = "static_runtime::index_add_scaled_"


class Routed(nn.Module):
    """Top-2 routing over four linear experts; each expert's output, weighted by its routing
    weight, added back at its tokens' rows."""

    def __init__(self, dim: int = 24, experts: int = 4):
        super().__init__()
        torch.manual_seed(dim)
        self.router = nn.Linear(dim, experts, bias=False)
        self.experts = nn.ModuleList([nn.Linear(dim, dim) for _ in range(experts)])

    def forward(self, x: Tensor) -> Tensor:
        weights, chosen = torch.topk(torch.softmax(self.router(x), dim=-1), 2, dim=-1)
        out = torch.zeros_like(x)
        for e, expert in enumerate(self.experts):
            rows, slot = torch.where(chosen == e)
            if rows.numel() > 0:
                y = expert(x[rows]) * weights[rows, slot].unsqueeze(-1)
                out.index_add_(0, rows, y)
        return out


def _force(monkeypatch, kernel: str) -> None:
    monkeypatch.setattr(KernelChooser, "choose", lambda self, key, names, make, default: Choice(
        kernel if kernel in names and key.startswith("index_add_scaled_") else default, {},
        "forced"))


def _fused(mod: sr.StaticModule) -> int:
    return kinds(mod.graph).count(FUSED)


@pytest.mark.parametrize("kernel", ["native", "aten"])
def test_experts_scatter_fuses_and_answers_as_torchscript(kernel, monkeypatch):
    _force(monkeypatch, kernel)
    g = torch.Generator().manual_seed(5)
    mods = check(Routed().eval(), (torch.randn(9, 24, generator=g),),
                 (torch.randn(2, 24, generator=g),),  # (two tokens: some experts get none)
                 options={**OPTIONS, "default_kernels": sr.StaticModuleOptions(
                     kernel_choice="default")}, rtol=1e-5, atol=1e-6)
    assert _fused(mods["measure"]) == 4 and _fused(mods["interpreter"]) == 4
    assert _fused(mods["default_kernels"]) == 0  # (only where the kernel can be measured)
    assert "index_add_scaled_: kernel chosen per row count by measurement" in \
        mods["measure"].describe()


def test_ours_adds_each_rows_product_as_eager_does(monkeypatch):
    """Repeated rows accumulate in index order, the product rounded before the sum: the same
    bits as ``index_add_(0, index, source * scale[:, None])``; the inputs are left alone."""
    _force(monkeypatch, "native")
    src = """
def f(out: torch.Tensor, index: torch.Tensor, source: torch.Tensor, scale: torch.Tensor):
    out = out.clone()
    out.index_add_(0, index, source * scale.unsqueeze(-1))
    return out
"""
    g = torch.Generator().manual_seed(1)
    for rows, n, width in ((5, 7, 37), (3, 2, 16)):
        args = (torch.randn(rows, width, generator=g), torch.randint(0, rows, (n,), generator=g),
                torch.randn(n, width, generator=g), torch.rand(n, generator=g))
        mod = sr.StaticModule(script(src), MEASURE)
        assert _fused(mod) == 1
        before = [a.clone() for a in args]
        want = args[0].clone().index_add_(0, args[1], args[2] * args[3].unsqueeze(-1))
        for _ in range(2):
            assert torch.equal(mod(*args), want)
        assert all(torch.equal(a, b) for a, b in zip(args, before, strict=True))


def test_an_index_out_of_range_raises_as_atens_does(monkeypatch):
    _force(monkeypatch, "native")
    src = """
def f(out: torch.Tensor, index: torch.Tensor, source: torch.Tensor, scale: torch.Tensor):
    out.index_add_(0, index, source * scale.unsqueeze(-1))
    return out * 1.0
"""
    mod = sr.StaticModule(script(src), MEASURE)
    good = (torch.tensor([0, 3]), torch.randn(2, 8), torch.rand(2))
    mod(torch.zeros(4, 8), *good)
    ours, theirs = torch.zeros(4, 8), torch.zeros(4, 8)
    with pytest.raises((IndexError, RuntimeError), match="index") as raised:
        mod(ours, torch.tensor([1, 4]), *good[1:])
    with pytest.raises(type(raised.value)):
        script(src)(theirs, torch.tensor([1, 4]), *good[1:])
    assert torch.equal(ours, theirs)  # (what ATen wrote before it raised, as eager leaves it)


@pytest.mark.parametrize("body", [
    "out.index_add_(0, index, source * scale.unsqueeze(0).t())",  # another view of the weights
    "out.index_add_(0, index, source * scale.unsqueeze(-1), alpha=2)",
    "out.index_add_(1, index, source * scale.unsqueeze(-1))",
    "y = source * scale.unsqueeze(-1)\n    out.index_add_(0, index, y)\n    out = out + y.sum()",
])
def test_near_misses_are_left_alone(body):
    src = f"""
def f(out: torch.Tensor, index: torch.Tensor, source: torch.Tensor, scale: torch.Tensor):
    out = out.clone()
    {body}
    return out
"""
    mod = sr.StaticModule(script(src), MEASURE)
    assert _fused(mod) == 0
    args = (torch.randn(4, 4), torch.tensor([0, 3, 3, 1]), torch.randn(4, 4), torch.rand(4))
    torch.testing.assert_close(mod(*args), script(src)(*args))
