"""Sequence models without recurrence, scripted: a temporal convolutional network (Bai, Kolter
and Koltun, arXiv:1803.01271) — causal dilated 1-D convolutions, each padded on both sides
and its future trimmed off (the paper's ``Chomp1d``), in residual blocks."""

from __future__ import annotations

import torch
from torch import Tensor, nn

from .spec import SCRIPT, ZooModel

FAMILY = "temporal convolution"
FEATURES, STEPS = 8, 128


class Chomp1d(nn.Module):
    """Drops the last ``size`` steps: what remains of a padded convolution is causal."""

    def __init__(self, size: int):
        super().__init__()
        self.size = size

    def forward(self, x: Tensor) -> Tensor:
        return x[:, :, :-self.size].contiguous()


class TemporalBlock(nn.Module):
    """Two causal dilated convolutions with ReLU (and dropout, off at inference), added to
    the input (through a 1×1 convolution when the widths differ), then ReLU."""

    def __init__(self, cin: int, cout: int, kernel: int, dilation: int):
        super().__init__()
        pad = (kernel - 1) * dilation
        self.net = nn.Sequential(
            nn.Conv1d(cin, cout, kernel, padding=pad, dilation=dilation), Chomp1d(pad),
            nn.ReLU(), nn.Dropout(0.1),
            nn.Conv1d(cout, cout, kernel, padding=pad, dilation=dilation), Chomp1d(pad),
            nn.ReLU(), nn.Dropout(0.1))
        self.downsample = nn.Conv1d(cin, cout, 1) if cin != cout else nn.Identity()

    def forward(self, x: Tensor) -> Tensor:
        return torch.relu(self.net(x) + self.downsample(x))


class TCN(nn.Module):
    """Four temporal blocks (32 channels, kernel 3, dilations 1, 2, 4, 8: a receptive field of
    61 steps) over a multivariate series, a forecast head on the last step."""

    def __init__(self, channels: int = 32, horizon: int = 12):
        super().__init__()
        blocks = [TemporalBlock(FEATURES if k == 0 else channels, channels, 3, 2 ** k)
                  for k in range(4)]
        self.blocks = nn.Sequential(*blocks)
        self.head = nn.Linear(channels, horizon)

    def forward(self, series: Tensor) -> Tensor:
        return self.head(self.blocks(series)[:, :, -1])


def _series(batch: int, g: torch.Generator) -> tuple:
    return (torch.randn(batch, FEATURES, STEPS, generator=g),)


MODELS = [
    ZooModel("tcn", FAMILY, "temporal conv net: 4 residual blocks of causal dilated conv1d "
             "(32 ch, kernel 3, dilation 1/2/4/8, padding + chomp), 8 features × 128 steps, "
             "forecast head", (1, 8), TCN, _series, SCRIPT),
]
