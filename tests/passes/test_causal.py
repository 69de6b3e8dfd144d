"""``causal_conv1d`` (``passes/causal.py``): a conv1d padded on both sides whose last outputs
are sliced off becomes the conv1d of the input padded on the left; near misses are left
alone; answers equal TorchScript's and eager's, scripted, traced and exported."""

import pytest
import torch
from differential import check, script
from torch import nn

import static_runtime as sr


class Chomped(nn.Module):
    """A TCN block's causal convolution: pad both sides, cut the future off (``Chomp1d``,
    with or without its ``contiguous``), ReLU."""

    def __init__(self, contiguous: bool = True, dilation: int = 2, cin: int = 4):
        super().__init__()
        self.pad = 2 * dilation
        self.conv = nn.Conv1d(cin, 6, 3, padding=self.pad, dilation=dilation)
        self.contiguous = contiguous

    def forward(self, x):
        y = self.conv(x)[:, :, :-self.pad]
        if self.contiguous:
            y = y.contiguous()
        return torch.relu(y)


def _kinds(model, options=None) -> list[str]:
    return [n.kind for n in sr.prepare(script(model), options).walk()
            if n.kind != "prim::Constant"]


def _series(*shape):
    return [torch.randn(*shape, generator=torch.Generator().manual_seed(sum(shape)))]


@pytest.mark.parametrize("contiguous", [True, False])
def test_chomped_convolution_becomes_left_padded(contiguous):
    model = torch.jit.script(Chomped(contiguous).eval())
    kinds = _kinds(model)
    assert "aten::constant_pad_nd" in kinds
    assert "aten::slice" not in kinds and "aten::contiguous" not in kinds
    assert "aten::relu_" in kinds  # (the convolution's own result now: in place)
    check(model, _series(2, 4, 20), _series(1, 4, 9))
    off = sr.StaticModuleOptions(causal_conv1d=False)
    assert "aten::constant_pad_nd" not in _kinds(model, off)


def test_traced_and_exported():
    model = Chomped(dilation=4).eval()
    x = _series(3, 4, 16)[0]
    traced = torch.jit.trace(model, (x,))
    assert "aten::constant_pad_nd" in _kinds(traced)
    check(traced, [x], _series(3, 4, 16))
    batch = torch.export.Dim("batch", min=1, max=64)
    program = torch.export.export(model, (x,), dynamic_shapes=({0: batch},))
    mod = sr.StaticModule(program)
    assert "aten::constant_pad_nd" in [n.kind for n in mod.graph.walk()]
    for b in (3, 5):
        y = _series(b, 4, 16)[0]
        with torch.no_grad():
            torch.testing.assert_close(mod(y), model(y))


NEAR_MISSES = {
    # stride 2: the outputs kept are not those of a left-padded convolution
    "stride": """
def f(x: torch.Tensor, w: torch.Tensor):
    return torch.conv1d(x, w.detach(), None, [2], [4], [2])[:, :, :-4]
""",
    # one output fewer cut than the padding
    "end": """
def f(x: torch.Tensor, w: torch.Tensor):
    return torch.conv1d(x, w.detach(), None, [1], [4], [2])[:, :, :-3]
""",
    # the start cut instead
    "start": """
def f(x: torch.Tensor, w: torch.Tensor):
    return torch.conv1d(x, w.detach(), None, [1], [4], [2])[:, :, 4:]
""",
    # the result used twice
    "two_uses": """
def f(x: torch.Tensor, w: torch.Tensor):
    y = torch.conv1d(x, w.detach(), None, [1], [4], [2])
    return y[:, :, :-4] + y[:, :, 4:]
""",
}


@pytest.mark.parametrize("name", sorted(NEAR_MISSES))
def test_near_misses_are_left_alone(name):
    """(The weight is an input here, so no rewrite could need a constant: the pass looks at
    stride, padding and the slices only.)"""
    src = NEAR_MISSES[name]
    assert "aten::constant_pad_nd" not in _kinds(src)
    w = torch.randn(5, 3, 3, generator=torch.Generator().manual_seed(1))
    check(src, [*_series(2, 3, 12), w], [*_series(1, 3, 10), w])
