"""``plain_convolutions`` (``passes/convolutions.py``): a traced convolution (``aten::_convolution``)
becomes ``conv1d``/``conv2d``/``conv3d``, so its batch norm is folded and it is fused like a
scripted one; a transposed one is left alone; answers equal TorchScript's."""

import pytest
import torch
from differential import check
from torch import nn

import static_runtime as sr


def _kinds(model, options=None) -> list[str]:
    return [n.kind for n in sr.prepare(model, options).walk() if n.kind != "prim::Constant"]


def _x(*shape):
    return [torch.randn(*shape, generator=torch.Generator().manual_seed(sum(shape)))]


class ConvBnRelu(nn.Module):
    """A ResNet stem as ``transformers`` writes it: conv (no bias), batch norm, ReLU, grouped
    conv, batch norm."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 16, 3, stride=2, padding=1, bias=False)
        self.bn = nn.BatchNorm2d(16)
        self.grouped = nn.Conv2d(16, 16, 3, padding=1, groups=4, bias=False)
        self.bn2 = nn.BatchNorm2d(16)
        for bn in (self.bn, self.bn2):
            bn.running_mean.uniform_(-1, 1)
            bn.running_var.uniform_(0.5, 2)

    def forward(self, x):
        return self.bn2(self.grouped(torch.relu(self.bn(self.conv(x)))))


def test_a_traced_conv_net_is_folded_and_fused():
    traced = torch.jit.trace(ConvBnRelu().eval(), _x(1, 3, 16, 16))
    assert "aten::_convolution" in _kinds(traced, sr.StaticModuleOptions(plain_convolutions=False))
    kinds = _kinds(traced)
    assert "aten::_convolution" not in kinds and "aten::batch_norm" not in kinds
    assert "static_runtime::conv2d_pointwise" in kinds
    check(traced, _x(1, 3, 16, 16), _x(2, 3, 24, 20))
    off = sr.StaticModuleOptions(plain_convolutions=False)
    assert "aten::batch_norm" in _kinds(traced, off)


@pytest.mark.parametrize("conv,shape,kind", [
    (nn.Conv1d(4, 6, 3, padding=2, dilation=2), (2, 4, 20), "aten::conv1d"),
    (nn.Conv3d(2, 3, 3, padding=1), (1, 2, 5, 6, 7), "aten::conv3d"),
], ids=["1d", "3d"])
def test_other_ranks_take_their_operator(conv, shape, kind):
    traced = torch.jit.trace(conv.eval(), _x(*shape))
    kinds = _kinds(traced, sr.StaticModuleOptions(fuse_convolution=False, causal_conv1d=False))
    assert kind in kinds and "aten::_convolution" not in kinds
    bigger = (shape[0] + 1, *shape[1:-1], shape[-1] + 3)
    check(traced, _x(*shape), _x(*bigger))


def test_a_transposed_convolution_is_left_alone():
    model = nn.ConvTranspose2d(4, 3, 3, stride=2, padding=1, output_padding=1).eval()
    traced = torch.jit.trace(model, _x(1, 4, 6, 6))
    assert "aten::_convolution" in _kinds(traced)
    check(traced, _x(1, 4, 6, 6), _x(2, 4, 5, 7))
