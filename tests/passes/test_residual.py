"""``fuse_linear_residual`` (``passes/residual.py``) and the node it makes (``ops/residual.py``):
``act(linear(x, W, b) + r)`` becomes one node whose kernel is measured; with either kernel
forced it equals TorchScript on two shape sets — either order of the sum, with and without
bias and activation, a residual that broadcasts, K past the kernel's K block —; residuals
that widen the sum or promote its dtype run the composite; near misses are left alone."""

import pytest
import torch
import torch.nn.functional as F
from differential import check, script
from measured import (  # noqa: F401
    MEASURE,
    OPTIONS,
    answers_as,
    force_kernel,
    fresh_kernel_cache,
    needs_ckernels,
)
from passes_helpers import kinds
from torch import Tensor, nn

import static_runtime as sr
from static_runtime.ops import ckernels

pytestmark = needs_ckernels


class Residual(nn.Module):
    """``act(linear(x) + r)``, the product on either side of the sum."""

    def __init__(self, k: int, n: int, bias: bool, act: str, product_first: bool):
        super().__init__()
        torch.manual_seed(k + n)
        self.proj = nn.Linear(k, n, bias=bias)
        self.act, self.product_first = act, product_first

    def forward(self, x: Tensor, r: Tensor) -> Tensor:
        s = self.proj(x) + r if self.product_first else r + self.proj(x)
        if self.act == "tanh":
            return torch.tanh(s)
        if self.act == "relu":
            return torch.relu(s)
        if self.act == "gelu":
            return F.gelu(s)
        return s


class Refiner(nn.Module):
    """A recurrence ``h = tanh(W h + U x)``, as a fixed-point refinement loops it."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(3)
        self.w = nn.Linear(32, 32, bias=False)
        self.u = nn.Linear(24, 32)

    def forward(self, x: Tensor) -> Tensor:
        ux = self.u(x)
        h = torch.zeros_like(ux)
        for _ in range(3):
            h = torch.tanh(self.w(h) + ux)
        return h


def _fused(mod: sr.StaticModule) -> int:
    return kinds(mod.graph).count("static_runtime::linear_residual")


CASES = [  # (K, N, bias, activation, product first, x and r of each set)
    (32, 48, False, "none", True, ((4, 32), (4, 48)), ((2, 9, 32), (2, 9, 48))),
    (64, 40, True, "tanh", False, ((1, 64), (1, 40)), ((33, 64), (33, 40))),
    (16, 24, True, "relu", True, ((5, 16), (24,)), ((2, 3, 16), (1, 3, 24))),  # broadcast
    (300, 20, False, "gelu", True, ((3, 300), (3, 20)), ((7, 300), (1, 20))),  # K > 256
]


@pytest.mark.parametrize("kernel", ["native", "aten"])
@pytest.mark.parametrize("case", CASES, ids=lambda c: f"k{c[0]}_n{c[1]}_{c[3]}_bias{c[2]}")
def test_a_product_and_its_residual_fuse_and_answer_as_torchscript(case, kernel, monkeypatch):
    force_kernel(monkeypatch, kernel)
    k, n, bias, act, product_first, first, second = case
    model = Residual(k, n, bias, act, product_first).eval()
    sets = [tuple(torch.randn(*shape) for shape in shapes) for shapes in (first, second)]
    mods = check(model, sets[0], sets[1],
                 options={**OPTIONS, "default_kernels": sr.StaticModuleOptions(
                     kernel_choice="default")}, rtol=1e-4, atol=1e-4)
    assert _fused(mods["measure"]) == 1 and _fused(mods["interpreter"]) == 1
    assert _fused(mods["default_kernels"]) == 0  # (only where the kernel can be measured)
    assert kinds(mods["measure"].graph).count("aten::linear") == 0
    assert f": {kernel} (forced)" in mods["measure"].describe()


@pytest.mark.parametrize("kernel", ["native", "aten"])
def test_a_recurrence_in_a_loop_fuses(kernel, monkeypatch):
    force_kernel(monkeypatch, kernel)
    mods = check(Refiner().eval(), (torch.randn(1, 24),), (torch.randn(5, 24),),
                 options=OPTIONS, rtol=1e-4, atol=1e-4)
    assert _fused(mods["measure"]) >= 1


def test_residuals_that_widen_or_promote_the_sum_run_the_composite(monkeypatch):
    force_kernel(monkeypatch, "native")
    model = Residual(8, 6, True, "tanh", True).eval()
    mod = sr.StaticModule(script(model), MEASURE)
    answers_as(mod, model, [
        (torch.randn(3, 8), torch.randn(2, 3, 6)),  # widens (3, 6) to (2, 3, 6)
        (torch.randn(3, 8), torch.randn(3, 6, dtype=torch.float64)),
        (torch.randn(3, 8), torch.randn(3, 1)),
        (torch.randn(3, 8), torch.tensor(0.5))])
    assert _fused(mod) == 1


def test_near_misses_are_left_alone():
    def used_twice(x: Tensor, r: Tensor, w: Tensor) -> tuple[Tensor, Tensor]:
        y = F.linear(x, w)
        return y + r, y  # the product is read again

    def weight_given(x: Tensor, r: Tensor, w: Tensor) -> Tensor:
        return F.linear(x, w) + r  # the weight is an input, not a constant

    def scaled(x: Tensor, r: Tensor, w: Tensor) -> Tensor:
        return torch.add(r, F.linear(x, w), alpha=2)

    class WrittenBetween(nn.Module):
        def __init__(self):
            super().__init__()
            self.proj = nn.Linear(8, 8)

        def forward(self, x: Tensor, r: Tensor) -> Tensor:
            y = self.proj(x)
            x.add_(1.0)  # the product read x before this
            return y + r

    w = torch.randn(8, 8)
    for fn, args in ((used_twice, (torch.randn(3, 8), torch.randn(3, 8), w)),
                     (weight_given, (torch.randn(3, 8), torch.randn(3, 8), w)),
                     (scaled, (torch.randn(3, 8), torch.randn(3, 8), w))):
        mods = check(fn, args, args, options=OPTIONS)
        assert _fused(mods["measure"]) == 0, fn.__name__
    model = WrittenBetween().eval()
    mod = sr.StaticModule(script(model), MEASURE)
    for shape in ((3, 8), (5, 8)):
        x, r = torch.randn(shape), torch.randn(shape)
        x_ours, x_eager = x.clone(), x.clone()
        torch.testing.assert_close(mod(x_ours, r), model(x_eager, r))
        assert torch.equal(x_ours, x_eager)  # (the write reaches the caller as in eager)


def test_the_kernel_adds_the_residual_before_the_activation():
    for m, k, n, act in ((1, 64, 64, "tanh"), (9, 300, 17, "relu"), (4, 0, 5, "sigmoid")):
        torch.manual_seed(m + k)
        w, b = torch.randn(n, k) / max(k, 1) ** 0.5, torch.randn(n)
        x, r = torch.randn(m, k), torch.randn(m, n)
        want = {"tanh": torch.tanh, "relu": torch.relu, "sigmoid": torch.sigmoid}[act](
            F.linear(x, w, b) + r)
        run = ckernels.Gemm(w.t(), b, act).with_residual(m)
        out = torch.full((m, n), float("nan"))
        before = [x.clone(), r.clone()]
        run(x, out, r)  # the residual read where it is
        torch.testing.assert_close(out, want, rtol=1e-4, atol=1e-4)
        assert torch.equal(x, before[0]) and torch.equal(r, before[1])
        inplace = r.clone()
        run(x, inplace, inplace)  # the residual in the result itself
        torch.testing.assert_close(inplace, want, rtol=1e-4, atol=1e-4)


def test_empty_batches_and_a_residual_that_is_the_input(monkeypatch):
    # x + proj(x) (the residual is the product's own input) and batches of no rows
    force_kernel(monkeypatch, "native")

    class SelfResidual(nn.Module):
        def __init__(self):
            super().__init__()
            torch.manual_seed(5)
            self.proj = nn.Linear(16, 16)

        def forward(self, x: Tensor) -> Tensor:
            return torch.relu(x + self.proj(x))

    model = SelfResidual().eval()
    mod = sr.StaticModule(script(model), MEASURE)
    for shape in ((3, 16), (0, 16), (2, 5, 16), (3, 16)):
        x = torch.randn(shape)
        before = x.clone()
        for _ in range(2):
            torch.testing.assert_close(mod(x), model(x), rtol=1e-5, atol=1e-5)
        assert torch.equal(x, before)
    assert _fused(mod) == 1
