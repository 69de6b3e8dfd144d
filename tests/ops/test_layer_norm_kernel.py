"""``aten::layer_norm`` under measured kernels (``ops/norms.py``): with either kernel forced, a
layer norm over the last dimension equals TorchScript's on two shape sets — with weight and
bias, with neither, with a weight alone, widths that are and are not multiples of the vector
width, rows far from zero (the variance must not cancel) — and a norm over two dimensions or
a strided input runs ATen's."""

import pytest
import torch
from differential import check
from measured import MEASURE, OPTIONS, fresh_kernel_cache, needs_ckernels  # noqa: F401
from torch import nn

import static_runtime as sr
from static_runtime.ops.kernels import Choice, KernelChooser
from static_runtime.ops.registry import Tier

pytestmark = needs_ckernels


class Norms(nn.Module):
    def __init__(self, h: int, affine: bool = True, bias: bool = True):
        super().__init__()
        torch.manual_seed(h)
        self.first = nn.LayerNorm(h, elementwise_affine=affine, bias=bias, eps=1e-6)
        self.second = nn.LayerNorm(h)
        with torch.no_grad():
            for p in self.parameters():
                p.add_(torch.randn_like(p) * 0.5)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        y = self.first(x)
        return y * 2.0, self.second(y + 1.0)


def _force(monkeypatch, kernel: str) -> None:
    monkeypatch.setattr(KernelChooser, "choose", lambda self, key, names, make, default: Choice(
        kernel if kernel in names else default, {}, "forced"))


@pytest.mark.parametrize("kernel", ["native", "aten"])
@pytest.mark.parametrize("h,affine,bias", [(64, True, True), (37, False, False),
                                           (128, True, False), (5, True, True)])
def test_forced_kernel_equals_torchscript(h, affine, bias, kernel, monkeypatch):
    _force(monkeypatch, kernel)
    g = torch.Generator().manual_seed(h)
    first = (torch.randn(3, 7, h, generator=g) * 4 + 1e3,)  # far from zero
    second = (torch.randn(1, h, generator=g),)
    mods = check(Norms(h, affine, bias).eval(), first, second, options=OPTIONS,
                 rtol=1e-4, atol=1e-4)
    assert mods["measure"].describe().count(f": {kernel} (forced)") >= 2  # (both norms)


def test_other_norms_and_strided_inputs_run_atens(monkeypatch):
    _force(monkeypatch, "native")

    class Other(nn.Module):
        def __init__(self):
            super().__init__()
            self.two_dims = nn.LayerNorm([4, 6])
            self.last = nn.LayerNorm(4)

        def forward(self, x: torch.Tensor):
            return self.two_dims(x), self.last(x.transpose(1, 2))

    mods = check(Other().eval(), (torch.randn(2, 4, 6),), (torch.randn(3, 4, 6),),
                 options=OPTIONS)
    assert "native (forced)" not in mods["measure"].describe()


@pytest.mark.parametrize("kernel", ["native", "aten"])
def test_ours_writes_the_arena_and_atens_result_is_allocated(kernel, monkeypatch):
    """Where ours is chosen the norm writes its arena tensor (no allocation a call); where
    ATen's is, its out variant declines and the value is allocated — both equal eager on
    every call, the input left alone."""
    _force(monkeypatch, kernel)
    model = Norms(64).eval()
    mod = sr.StaticModule(torch.jit.script(model), MEASURE)
    norms = [pn for pn in mod.plan.nodes() if pn.kind == "aten::layer_norm"]
    assert len(norms) == 2 and all(pn.tier is Tier.OUT for pn in norms)
    for shape in ((3, 7, 64), (2, 64), (3, 7, 64)):
        x = torch.randn(shape)
        before = x.clone()
        for _ in range(3):
            expected = model(x)
            for got, want in zip(mod(x), expected, strict=True):
                torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)
        assert torch.equal(x, before)
    if kernel == "native":  # the first norm's result feeds the second only: in the arena
        placed = {p.request.name for p in mod.memory_plan().placements}
        assert norms[0].node.outputs[0].name in placed, placed
