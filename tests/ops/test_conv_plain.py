"""Unfused convolutions under measured kernels (``ops/conv_plain.py``): a convolution whose
output is flattened (a patch embedding, which ``fuse_convolution`` leaves alone), scripted as
``conv2d`` or traced as ``_convolution``, with either kernel forced equals TorchScript on two
shape sets, in ATen's output layout for contiguous and channels-last inputs; depthwise and
1 × 1 weights too; other groupings, transposed convolutions and weights given as inputs run
ATen's."""

import pytest
import torch
from differential import check
from measured import MEASURE, OPTIONS, fresh_kernel_cache, needs_ckernels  # noqa: F401
from torch import nn

import static_runtime as sr
from static_runtime.ops.kernels import Choice, KernelChooser

pytestmark = needs_ckernels


class PatchEmbedding(nn.Module):
    def __init__(self, cin: int = 3, cout: int = 24, k: int = 4, stride: int = 4,
                 padding: int = 0, groups: int = 1):
        super().__init__()
        torch.manual_seed(cout + k)
        self.conv = nn.Conv2d(cin, cout, k, stride=stride, padding=padding, groups=groups)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv(x).flatten(2).transpose(1, 2)


def _force(monkeypatch, kernel: str) -> None:
    """Every measured node takes ``kernel`` where it is a candidate (its default otherwise)."""
    monkeypatch.setattr(KernelChooser, "choose", lambda self, key, names, make, default: Choice(
        kernel if kernel in names else default, {}, "forced"))


MODELS = {
    "patch": lambda: PatchEmbedding(),
    "padded_3x3": lambda: PatchEmbedding(3, 16, 3, 1, 1),
    "depthwise": lambda: PatchEmbedding(8, 8, 3, 2, 1, groups=8),
    "pointwise": lambda: PatchEmbedding(8, 12, 1, 1, 0),
}


@pytest.mark.parametrize("kernel", ["native", "aten"])
@pytest.mark.parametrize("name", list(MODELS))
@pytest.mark.parametrize("traced", [False, True], ids=["scripted", "traced"])
def test_forced_kernel_equals_torchscript(name, traced, kernel, monkeypatch):
    _force(monkeypatch, kernel)
    model = MODELS[name]().eval()
    cin = model.conv.in_channels
    first, second = torch.randn(1, cin, 16, 16), torch.randn(3, cin, 12, 20)
    if traced:
        model = torch.jit.trace(model, (first,))
    mods = check(model, (first,), (second,), options=OPTIONS, rtol=1e-4, atol=1e-4)
    assert f": {kernel} (forced)" in mods["measure"].describe()


@pytest.mark.parametrize("name", ["patch", "depthwise"])
def test_the_result_has_atens_layout(name, monkeypatch):
    _force(monkeypatch, "native")

    def conv_only(model):
        return torch.jit.script(nn.Sequential(model.conv).eval())

    model = MODELS[name]().eval()
    scripted = conv_only(model)
    mod = sr.StaticModule(scripted, MEASURE)
    cin = model.conv.in_channels
    for x in (torch.randn(2, cin, 16, 16),
              torch.randn(2, cin, 16, 16).contiguous(memory_format=torch.channels_last)):
        for _ in range(2):
            got, want = mod(x), scripted(x)
            assert got.stride() == want.stride()
            torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)


def test_other_groupings_transposed_and_given_weights_run_atens(monkeypatch):
    _force(monkeypatch, "native")

    class Others(nn.Module):
        def __init__(self):
            super().__init__()
            self.grouped = nn.Conv2d(8, 8, 3, groups=2)
            self.transposed = nn.ConvTranspose2d(8, 4, 2, stride=2)

        def forward(self, x: torch.Tensor, w: torch.Tensor):
            return (self.grouped(x).flatten(2), self.transposed(x).flatten(2),
                    torch.conv2d(x, w).flatten(2))

    args = (torch.randn(1, 8, 6, 6), torch.randn(5, 8, 3, 3))
    mods = check(Others().eval(), args, (torch.randn(2, 8, 5, 7), args[1]), options=OPTIONS,
                 rtol=1e-4, atol=1e-4)
    assert "native (forced)" not in mods["measure"].describe()


class FrontEnd(nn.Module):
    """A speech model's front end: 1-D convolutions, traced as ``_convolution``."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(1)
        self.conv1 = nn.Conv1d(6, 16, 3, padding=1)
        self.conv2 = nn.Conv1d(16, 16, 3, stride=2, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return nn.functional.gelu(self.conv2(nn.functional.gelu(self.conv1(x)))).transpose(1, 2)


@pytest.mark.parametrize("kernel", ["native", "onednn", "aten"])
def test_a_traced_1d_convolution_gets_conv1d_candidates(kernel, monkeypatch):
    _force(monkeypatch, kernel)
    first, second = torch.randn(1, 6, 40), torch.randn(3, 6, 25)
    traced = torch.jit.trace(FrontEnd().eval(), (first,))
    assert "aten::_convolution" in str(traced.inlined_graph)
    mods = check(traced, (first,), (second,), options=OPTIONS, rtol=1e-4, atol=1e-4)
    assert mods["measure"].describe().count(f": {kernel} (forced)") >= 2
    # an unbatched input: the traced model's convolution refuses it, and so do we
    with pytest.raises(RuntimeError, match="3-dimensional input"):
        traced(torch.randn(6, 40))
    with pytest.raises(RuntimeError, match="3-dimensional input"):
        mods["measure"](torch.randn(6, 40))
