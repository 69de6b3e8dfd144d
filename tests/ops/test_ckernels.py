"""Our own C kernels (``static_runtime/ops/ckernels``) against eager PyTorch."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch
from torch import nn

import static_runtime as sr
from static_runtime.ops import ckernels

pytestmark = pytest.mark.skipif(not ckernels.available(),
                                reason=f"no C kernels: {ckernels.why_unavailable()}")

#: (channels, height, width, kernel, stride, padding, dilation): channel counts that are and
#: are not multiples of the vector widths (16, 8), borders wider than the interior, strides.
DEPTHWISE = [
    (64, 8, 8, (3, 3), (1, 1), (1, 1), (1, 1)),
    (72, 9, 7, (5, 5), (2, 2), (2, 2), (1, 1)),
    (20, 6, 11, (7, 7), (1, 1), (3, 3), (1, 1)),
    (3, 5, 5, (3, 1), (1, 2), (1, 0), (1, 1)),
    (40, 12, 10, (3, 3), (1, 1), (2, 2), (2, 2)),
    (24, 4, 4, (3, 3), (1, 1), (0, 0), (1, 1)),
    (136, 16, 3, (3, 3), (3, 1), (1, 1), (1, 1)),
]


@pytest.mark.parametrize("case", DEPTHWISE, ids=lambda c: "c{}_{}x{}_k{}".format(*c[:3], c[3]))
@pytest.mark.parametrize("act", sorted(ckernels.ACTIVATIONS))
@pytest.mark.parametrize("bias", [True, False])
def test_depthwise_matches_conv2d(case, act, bias):
    c, h, w, k, stride, padding, dilation = case
    torch.manual_seed(c + h)
    weight = torch.randn(c, 1, *k)
    b = torch.randn(c) if bias else None
    kernel = ckernels.depthwise_conv2d(weight, b, list(stride), list(padding), list(dilation),
                                       act)
    post = {"none": lambda t: t, "relu": torch.relu, "relu6": lambda t: torch.clamp(t, 0, 6),
            "hardswish": nn.functional.hardswish}[act]
    for batch, (hh, ww) in ((1, (h, w)), (3, (h + 3, w + 2))):  # two shape sets
        for layout in (torch.channels_last, torch.contiguous_format):
            x = torch.randn(batch, c, hh, ww).contiguous(memory_format=layout) * 3
            before = x.clone()
            expected = post(torch.conv2d(x, weight, b, stride, padding, dilation, c))
            out = kernel(x)
            assert out.is_contiguous(memory_format=torch.channels_last)
            torch.testing.assert_close(out, expected, rtol=1e-5, atol=1e-5)
            torch.testing.assert_close(kernel(x), out, rtol=0, atol=0)  # repeated: the same
            assert torch.equal(x, before)  # the input is left alone


def test_depthwise_refuses_what_it_cannot_take():
    kernel = ckernels.depthwise_conv2d(torch.randn(8, 1, 3, 3), None, [1, 1], [0, 0], [1, 1],
                                       "none")
    with pytest.raises(ValueError, match="cannot take an input of shape"):
        kernel(torch.randn(1, 8, 2, 2))  # smaller than the kernel
    with pytest.raises(ValueError, match="cannot take an input of shape"):
        kernel(torch.randn(1, 4, 5, 5))  # another channel count
    with pytest.raises(ValueError, match="float32 4-D CPU tensor"):
        kernel(torch.randn(1, 8, 5, 5, dtype=torch.float64))
    with pytest.raises(ValueError, match="float32"):
        ckernels.depthwise_conv2d(torch.randn(8, 2, 3, 3), None, [1, 1], [0, 0], [1, 1], "none")
    with pytest.raises(ValueError, match="applies"):
        ckernels.depthwise_conv2d(torch.randn(8, 1, 3, 3), None, [1, 1], [0, 0], [1, 1], "gelu")


class Depthwise(nn.Module):
    """MobileNet's block: expand, depthwise (ReLU6 inside the kernel, hardswish after it),
    project."""

    def __init__(self):
        super().__init__()
        self.expand = nn.Conv2d(8, 32, 1)
        self.depth = nn.Conv2d(32, 32, 3, padding=1, groups=32)
        self.depth2 = nn.Conv2d(32, 32, 5, stride=2, padding=2, groups=32, bias=False)
        self.project = nn.Conv2d(32, 8, 1)

    def forward(self, x):
        h = torch.clamp(self.depth(self.expand(x)), 0, 6)
        h = nn.functional.hardswish(self.depth2(h))
        return self.project(h)


def test_a_model_measures_our_depthwise_kernel_and_answers_as_eager(tmp_path, monkeypatch):
    monkeypatch.setenv("STATIC_RUNTIME_CACHE_DIR", str(tmp_path))
    model = Depthwise().eval()
    mod = sr.StaticModule(torch.jit.script(model), sr.StaticModuleOptions(
        kernel_choice="measure", channels_last=True))
    with torch.inference_mode():
        for shape in ((1, 8, 12, 12), (2, 8, 9, 13)):
            x = torch.randn(shape)
            torch.testing.assert_close(mod(x), model(x), rtol=1e-4, atol=1e-5)
            torch.testing.assert_close(mod(x), model(x), rtol=1e-4, atol=1e-5)
    described = mod.describe()
    assert described.count("native ") >= 2 and "µs: " in described  # timed beside the others


def test_switched_off_the_kernels_are_not_candidates(tmp_path):
    code = ("import warnings; warnings.simplefilter('error');"
            "from static_runtime.ops import ckernels, conv; import torch;"
            "k = conv.ConvKernels(torch.randn(8, 1, 3, 3), None, [1, 1], [1, 1], [1, 1], 8, "
            "'none'); print(ckernels.available(), ckernels.why_unavailable(), k.names())")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={**os.environ, ckernels.ENV_SWITCH: "0",
                              "STATIC_RUNTIME_CACHE_DIR": str(tmp_path)}).stdout
    assert out.split()[:1] == ["False"] and "native" not in out and "=0" in out


def test_a_broken_compiler_leaves_pytorchs_kernels(tmp_path):
    code = ("from static_runtime.ops import ckernels\n"
            "import warnings\n"
            "with warnings.catch_warnings(record=True) as w:\n"
            "    warnings.simplefilter('always'); print(ckernels.available(), len(w))\n"
            "print(ckernels.why_unavailable())")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={**os.environ, "CC": "no-such-compiler",
                              "STATIC_RUNTIME_CACHE_DIR": str(tmp_path)}).stdout
    first, reason = out.splitlines()
    assert first == "False 1" and "no-such-compiler" in reason
