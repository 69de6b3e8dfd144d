"""Convolutional image models, scripted: a small ResNet and a MobileNet-v3-style net of
depthwise-separable inverted residuals (depthwise conv + BatchNorm + ReLU6 / hardswish,
squeeze-and-excitation)."""

from __future__ import annotations

import torch
from torch import Tensor, nn

from .spec import SCRIPT, ZooModel

FAMILY = "convolutional"


class BasicBlock(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.shortcut = nn.Sequential()
        if stride != 1 or cin != cout:
            self.shortcut = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False),
                                          nn.BatchNorm2d(cout))

    def forward(self, x: Tensor) -> Tensor:
        y = torch.relu(self.bn1(self.conv1(x)))
        return torch.relu(self.bn2(self.conv2(y)) + self.shortcut(x))


class ResNetTiny(nn.Module):
    """Stem conv, three stages of two basic blocks (16, 32, 64 channels), global average
    pooling, a linear classifier; 32 × 32 images."""

    def __init__(self, classes: int = 10):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 16, 3, 1, 1, bias=False), nn.BatchNorm2d(16),
                                  nn.ReLU(inplace=True))
        blocks = []
        cin = 16
        for cout, stride in ((16, 1), (32, 2), (64, 2)):
            blocks += [BasicBlock(cin, cout, stride), BasicBlock(cout, cout, 1)]
            cin = cout
        self.blocks = nn.Sequential(*blocks)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(64, classes)

    def forward(self, x: Tensor) -> Tensor:
        return self.fc(torch.flatten(self.pool(self.blocks(self.stem(x))), 1))


class SqueezeExcite(nn.Module):
    def __init__(self, channels: int, reduced: int):
        super().__init__()
        self.reduce = nn.Conv2d(channels, reduced, 1)
        self.expand = nn.Conv2d(reduced, channels, 1)

    def forward(self, x: Tensor) -> Tensor:
        s = nn.functional.adaptive_avg_pool2d(x, 1)
        s = nn.functional.hardsigmoid(self.expand(torch.relu(self.reduce(s))))
        return x * s


class InvertedResidual(nn.Module):
    """1×1 expansion, depthwise 3×3, optional squeeze-and-excitation, 1×1 projection; a
    residual connection when shapes allow."""

    def __init__(self, cin: int, cout: int, stride: int, expand: int, hardswish: bool,
                 se: bool):
        super().__init__()
        mid = cin * expand
        act: nn.Module = nn.Hardswish() if hardswish else nn.ReLU6()
        layers: list[nn.Module] = [nn.Conv2d(cin, mid, 1, bias=False), nn.BatchNorm2d(mid), act,
                                   nn.Conv2d(mid, mid, 3, stride, 1, groups=mid, bias=False),
                                   nn.BatchNorm2d(mid), act]
        if se:
            layers.append(SqueezeExcite(mid, max(8, mid // 4)))
        layers += [nn.Conv2d(mid, cout, 1, bias=False), nn.BatchNorm2d(cout)]
        self.body = nn.Sequential(*layers)
        self.residual = stride == 1 and cin == cout

    def forward(self, x: Tensor) -> Tensor:
        y = self.body(x)
        if self.residual:
            y = y + x
        return y


class MobileNetTiny(nn.Module):
    """MobileNet-v3-style: a strided hardswish stem, six inverted residual blocks (ReLU6 then
    hardswish, some with squeeze-and-excitation), pooling and a hardswish classifier head."""

    def __init__(self, classes: int = 10):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 16, 3, 2, 1, bias=False), nn.BatchNorm2d(16),
                                  nn.Hardswish())
        cfg = [(16, 16, 1, 1, False, False), (16, 24, 2, 4, False, False),
               (24, 24, 1, 3, False, False), (24, 40, 2, 3, True, True),
               (40, 40, 1, 3, True, True), (40, 48, 1, 3, True, True)]
        self.blocks = nn.Sequential(*[InvertedResidual(*c) for c in cfg])
        self.head = nn.Sequential(nn.Conv2d(48, 96, 1, bias=False), nn.BatchNorm2d(96),
                                  nn.Hardswish(), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                                  nn.Linear(96, 128), nn.Hardswish(), nn.Dropout(0.2),
                                  nn.Linear(128, classes))

    def forward(self, x: Tensor) -> Tensor:
        return self.head(self.blocks(self.stem(x)))


def _randomise_batchnorm(model: nn.Module) -> nn.Module:
    """Running statistics and affine parameters drawn at random, so that BatchNorm is not the
    identity it is at initialisation (a fold or skip of it must then be exact to pass)."""
    for m in model.modules():
        if isinstance(m, nn.BatchNorm2d):
            with torch.no_grad():
                m.running_mean.normal_(0, 0.1)
                m.running_var.uniform_(0.5, 1.5)
                m.weight.uniform_(0.5, 1.5)
                m.bias.normal_(0, 0.1)
    return model


def _images(batch: int, g: torch.Generator) -> tuple:
    return (torch.randn(batch, 3, 32, 32, generator=g),)


MODELS = [
    ZooModel("resnet_tiny", FAMILY, "ResNet: stem + 3 stages × 2 basic blocks (16/32/64 ch), "
             "BatchNorm, 32×32 images", (1, 4),
             lambda: _randomise_batchnorm(ResNetTiny()), _images, SCRIPT),
    ZooModel("mobilenet_tiny", FAMILY, "MobileNet-v3-style inverted residuals: depthwise conv "
             "+ BN + ReLU6/hardswish, squeeze-excite, 32×32 images", (1, 4),
             lambda: _randomise_batchnorm(MobileNetTiny()), _images, SCRIPT),
]
