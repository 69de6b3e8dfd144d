"""``fuse_conv_residual`` (``passes/residual.py``) and the node it makes
(``ops/conv_residual.py``): a residual block's ``act(conv(x) + r)`` becomes one node whose
kernel is measured; with either kernel forced it equals TorchScript on two shape sets —
either order of the sum, each activation the fused convolution takes, a strided shortcut
through a 1 × 1 convolution, a grouped convolution (oneDNN's only) —; residuals that
broadcast or promote the sum run the composite; near misses are left alone."""

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
from static_runtime.ops.kernels import KernelChooser

pytestmark = needs_ckernels


class Block(nn.Module):
    """A stem convolution, then ResNet's basic block: conv-bn-relu, conv-bn, the shortcut (the
    block's input, or a strided 1 × 1 convolution of it) added, the activation after the
    sum. (The stem makes the shortcut a channels-last activation, as a network's blocks get
    it; a graph input is channels-first, which the composite takes.)"""

    def __init__(self, cin: int, cout: int, stride: int, act: str, conv_first: bool,
                 groups: int = 1):
        super().__init__()
        torch.manual_seed(cin + cout + stride)
        self.stem = nn.Conv2d(cin, cin, 3, 1, 1)
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False, groups=groups)
        self.bn2 = nn.BatchNorm2d(cout)
        self.down = nn.Conv2d(cin, cout, 1, stride) if stride != 1 or cin != cout else None
        for bn in (self.bn1, self.bn2):  # (statistics a trained network has)
            bn.running_mean.uniform_(-0.5, 0.5)
            bn.running_var.uniform_(0.5, 2.0)
        self.act, self.conv_first = act, conv_first

    def forward(self, x: Tensor) -> Tensor:
        x = torch.relu(self.stem(x))
        y = torch.relu(self.bn1(self.conv1(x)))
        y = self.bn2(self.conv2(y))
        shortcut = x if self.down is None else self.down(x)
        s = y + shortcut if self.conv_first else shortcut + y
        if self.act == "relu":
            return torch.relu(s)
        if self.act == "relu6":
            return F.relu6(s)
        if self.act == "hardswish":
            return F.hardswish(s)
        if self.act == "silu":
            return F.silu(s)
        return s


def _fused(mod: sr.StaticModule) -> int:
    return kinds(mod.graph).count("static_runtime::conv2d_residual")


CASES = [  # (in channels, out channels, stride, activation, convolution first in the sum)
    (8, 8, 1, "relu", True),
    (16, 16, 1, "none", False),
    (6, 40, 2, "relu6", True),   # a strided shortcut; two panels of output channels
    (12, 64, 1, "hardswish", False),
    (8, 24, 1, "silu", True),   # (ours applies silu in its epilogue too)
]


@pytest.mark.parametrize("kernel", ["native", "onednn"])
@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c[0]}to{c[1]}_s{c[2]}_{c[3]}")
def test_a_block_fuses_and_answers_as_torchscript(case, kernel, monkeypatch):
    force_kernel(monkeypatch, kernel)
    cin, cout, stride, act, conv_first = case
    model = Block(cin, cout, stride, act, conv_first).eval()
    mods = check(model, (torch.randn(1, cin, 9, 11),), (torch.randn(3, cin, 16, 12),),
                 options={**OPTIONS, "default_kernels": sr.StaticModuleOptions(
                     kernel_choice="default")}, rtol=1e-4, atol=1e-4)
    assert _fused(mods["measure"]) == 1 and _fused(mods["interpreter"]) == 1
    assert _fused(mods["default_kernels"]) == 0  # (only where the kernel can be measured)
    fused = [line for line in mods["measure"].describe().splitlines()
             if line.startswith("static_runtime::conv2d_residual")]
    assert len(fused) == 1 and f": {kernel} (forced)" in fused[0]  # (our call ran)
    # the sum and its activation are gone with the convolution
    assert "static_runtime::add" not in kinds(mods["measure"].graph)


def test_a_grouped_convolution_fuses_with_onednn_alone(monkeypatch):
    calls = []
    real = KernelChooser.choose

    def spy(self, key, names, make, default):
        calls.append(tuple(names))
        return real(self, key, names, make, default)

    monkeypatch.setattr(KernelChooser, "choose", spy)
    model = Block(8, 16, 2, "relu", True, groups=2).eval()
    mods = check(model, (torch.randn(2, 8, 7, 7),), (torch.randn(1, 8, 10, 6),),
                 options={"measure": MEASURE}, rtol=1e-4, atol=1e-4)
    assert _fused(mods["measure"]) == 1
    assert ("onednn",) in calls  # (our implicit GEMM takes one group)


def test_residuals_that_broadcast_or_promote_run_the_composite(monkeypatch):
    force_kernel(monkeypatch, "native")

    class Biased(nn.Module):
        def __init__(self):
            super().__init__()
            torch.manual_seed(0)
            self.conv = nn.Conv2d(4, 6, 3, padding=1)

        def forward(self, x: Tensor, r: Tensor) -> Tensor:
            return torch.relu(self.conv(x) + r)

    model = Biased().eval()
    mod = sr.StaticModule(script(model), MEASURE)
    x = torch.randn(2, 4, 5, 5)
    answers_as(mod, model, [(x, r) for r in (
        torch.randn(1, 6, 1, 1), torch.randn(6, 1, 1),  # broadcast
        torch.randn(2, 6, 5, 5, dtype=torch.float64),  # promotes
        torch.randn(2, 6, 5, 5),  # channels-first: the composite
        torch.randn(2, 6, 5, 5).contiguous(memory_format=torch.channels_last))])  # ours
    assert _fused(mod) == 1


def test_near_misses_are_left_alone():
    class UsedTwice(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = nn.Conv2d(4, 4, 3, padding=1)

        def forward(self, x: Tensor) -> tuple[Tensor, Tensor]:
            y = self.conv(x)
            return torch.relu(y + x), y  # the convolution's output is used again

    class ActivatedFirst(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = nn.Conv2d(4, 4, 3, padding=1)

        def forward(self, x: Tensor) -> Tensor:
            return torch.relu(self.conv(x)) + x  # the activation before the sum

    class Scaled(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = nn.Conv2d(4, 4, 3, padding=1)

        def forward(self, x: Tensor) -> Tensor:
            return torch.add(self.conv(x), x, alpha=2)

    for model in (UsedTwice(), ActivatedFirst(), Scaled()):
        mods = check(model.eval(), (torch.randn(2, 4, 6, 6),), (torch.randn(1, 4, 5, 9),),
                     options={"measure": MEASURE}, rtol=1e-4, atol=1e-4)
        assert _fused(mods["measure"]) == 0, type(model).__name__
