"""Conv nets of the 2020s, scripted: a ConvNeXt-style classifier (patchify stem, 7×7
depthwise convolutions, layer norm over channels in channels-last order, inverted-bottleneck
linears, layer scale), an EfficientNet-style one (MBConv blocks: depthwise 3×3 and 5×5,
squeeze-and-excitation, SiLU) and a small U-Net (an encoder of double convolutions and max
pooling, a decoder that upsamples by transposed convolution and by bilinear interpolation
and concatenates the skip connections)."""

from __future__ import annotations

import torch
from torch import Tensor, nn

from .convolutional import _randomise_batchnorm
from .spec import SCRIPT, ZooModel

FAMILY = "convolutional"


class LayerNorm2d(nn.Module):
    """ConvNeXt's ``channels_first`` layer norm: to channels-last, ``layer_norm``, back."""

    def __init__(self, channels: int, eps: float = 1e-6):
        super().__init__()
        self.norm = nn.LayerNorm(channels, eps=eps)

    def forward(self, x: Tensor) -> Tensor:
        return self.norm(x.permute(0, 2, 3, 1)).permute(0, 3, 1, 2)


class ConvNeXtBlock(nn.Module):
    """dwconv 7×7 → permute to NHWC → LayerNorm → Linear 4× → GELU → Linear → layer scale →
    permute back → residual (as in facebookresearch/ConvNeXt)."""

    def __init__(self, dim: int):
        super().__init__()
        self.dwconv = nn.Conv2d(dim, dim, 7, padding=3, groups=dim)
        self.norm = nn.LayerNorm(dim, eps=1e-6)
        self.pwconv1 = nn.Linear(dim, 4 * dim)
        self.pwconv2 = nn.Linear(4 * dim, dim)
        self.gamma = nn.Parameter(torch.rand(dim) * 0.5 + 0.25)

    def forward(self, x: Tensor) -> Tensor:
        y = self.dwconv(x).permute(0, 2, 3, 1)
        y = self.pwconv2(nn.functional.gelu(self.pwconv1(self.norm(y))))
        return x + (self.gamma * y).permute(0, 3, 1, 2)


class ConvNeXtTiny(nn.Module):
    """4×4 stride-4 stem on 64×64 images, two stages (48 channels at 16×16, 96 at 8×8) of two
    blocks with a LayerNorm + 2×2 stride-2 downsampling between, global average pooling, a
    LayerNorm and a linear head."""

    def __init__(self, classes: int = 10, dims: tuple[int, int] = (48, 96)):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, dims[0], 4, stride=4), LayerNorm2d(dims[0]))
        self.stage1 = nn.Sequential(ConvNeXtBlock(dims[0]), ConvNeXtBlock(dims[0]))
        self.down = nn.Sequential(LayerNorm2d(dims[0]), nn.Conv2d(dims[0], dims[1], 2, stride=2))
        self.stage2 = nn.Sequential(ConvNeXtBlock(dims[1]), ConvNeXtBlock(dims[1]))
        self.norm = nn.LayerNorm(dims[1], eps=1e-6)
        self.head = nn.Linear(dims[1], classes)

    def forward(self, x: Tensor) -> Tensor:
        x = self.stage2(self.down(self.stage1(self.stem(x))))
        return self.head(self.norm(x.mean(dim=(-2, -1))))


class SqueezeExciteSiLU(nn.Module):
    def __init__(self, channels: int, reduced: int):
        super().__init__()
        self.reduce = nn.Conv2d(channels, reduced, 1)
        self.expand = nn.Conv2d(reduced, channels, 1)

    def forward(self, x: Tensor) -> Tensor:
        s = nn.functional.adaptive_avg_pool2d(x, 1)
        return x * torch.sigmoid(self.expand(nn.functional.silu(self.reduce(s))))


class MBConv(nn.Module):
    """EfficientNet's block: 1×1 expansion (skipped at ratio 1), depthwise k×k, squeeze-and-
    excitation to a quarter of the input width, 1×1 projection; BatchNorm and SiLU; residual
    when the shapes allow."""

    def __init__(self, cin: int, cout: int, kernel: int, stride: int, expand: int):
        super().__init__()
        mid = cin * expand
        layers: list[nn.Module] = []
        if expand != 1:
            layers += [nn.Conv2d(cin, mid, 1, bias=False), nn.BatchNorm2d(mid), nn.SiLU()]
        layers += [nn.Conv2d(mid, mid, kernel, stride, kernel // 2, groups=mid, bias=False),
                   nn.BatchNorm2d(mid), nn.SiLU(), SqueezeExciteSiLU(mid, max(4, cin // 4)),
                   nn.Conv2d(mid, cout, 1, bias=False), nn.BatchNorm2d(cout)]
        self.body = nn.Sequential(*layers)
        self.residual = stride == 1 and cin == cout

    def forward(self, x: Tensor) -> Tensor:
        y = self.body(x)
        if self.residual:
            y = y + x
        return y


class EfficientNetTiny(nn.Module):
    """EfficientNet-B0's layout, narrowed: a strided 3×3 SiLU stem, six MBConv blocks (3×3 and
    5×5 depthwise, expansion 1 then 6), a 1×1 head to 128 channels, pooling, dropout, linear;
    32×32 images."""

    def __init__(self, classes: int = 10):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 16, 3, 2, 1, bias=False), nn.BatchNorm2d(16),
                                  nn.SiLU())
        cfg = [(16, 8, 3, 1, 1), (8, 16, 3, 2, 6), (16, 16, 3, 1, 6), (16, 24, 5, 2, 6),
               (24, 24, 5, 1, 6), (24, 40, 3, 1, 6)]
        self.blocks = nn.Sequential(*[MBConv(*c) for c in cfg])
        self.head = nn.Sequential(nn.Conv2d(40, 128, 1, bias=False), nn.BatchNorm2d(128),
                                  nn.SiLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                                  nn.Dropout(0.2), nn.Linear(128, classes))

    def forward(self, x: Tensor) -> Tensor:
        return self.head(self.blocks(self.stem(x)))


def _double_conv(cin: int, cout: int) -> nn.Sequential:
    return nn.Sequential(nn.Conv2d(cin, cout, 3, padding=1, bias=False), nn.BatchNorm2d(cout),
                         nn.ReLU(inplace=True),
                         nn.Conv2d(cout, cout, 3, padding=1, bias=False), nn.BatchNorm2d(cout),
                         nn.ReLU(inplace=True))


class UNetTiny(nn.Module):
    """Encoder 16 → 32 → 64 channels (max pooling between), decoder back up: a 2×2 stride-2
    transposed convolution, then a bilinear ``interpolate`` + 1×1 conv; each concatenated with
    its skip connection and double-convolved; per-pixel logits for 4 classes at 32×32."""

    def __init__(self, classes: int = 4):
        super().__init__()
        self.enc1, self.enc2, self.bottom = _double_conv(3, 16), _double_conv(16, 32), \
            _double_conv(32, 64)
        self.up2 = nn.ConvTranspose2d(64, 32, 2, stride=2)
        self.dec2 = _double_conv(64, 32)
        self.up1 = nn.Conv2d(32, 16, 1)
        self.dec1 = _double_conv(32, 16)
        self.out = nn.Conv2d(16, classes, 1)

    def forward(self, x: Tensor) -> Tensor:
        e1 = self.enc1(x)
        e2 = self.enc2(nn.functional.max_pool2d(e1, 2))
        b = self.bottom(nn.functional.max_pool2d(e2, 2))
        d2 = self.dec2(torch.cat([self.up2(b), e2], dim=1))
        up = nn.functional.interpolate(d2, scale_factor=2.0, mode="bilinear",
                                       align_corners=False)
        d1 = self.dec1(torch.cat([self.up1(up), e1], dim=1))
        return self.out(d1)


def _images(size: int):
    def make(batch: int, g: torch.Generator) -> tuple:
        return (torch.randn(batch, 3, size, size, generator=g),)

    return make


MODELS = [
    ZooModel("convnext_tiny", FAMILY, "ConvNeXt-style: 4×4 patchify stem, 2 stages × 2 blocks "
             "(7×7 depthwise, channels-last LayerNorm, 4× GELU MLP, layer scale), 48/96 ch, "
             "64×64 images", (1, 8), ConvNeXtTiny, _images(64), SCRIPT),
    ZooModel("efficientnet_tiny", FAMILY, "EfficientNet-style MBConv: depthwise 3×3/5×5 + "
             "BN + SiLU, squeeze-excite (sigmoid), 32×32 images", (1, 8),
             lambda: _randomise_batchnorm(EfficientNetTiny()), _images(32), SCRIPT),
    ZooModel("unet_tiny", "segmentation", "U-Net: double conv + BN + ReLU encoder (16/32/64 "
             "ch), transposed-conv and bilinear upsampling, skip concatenation, 32×32 → 4 "
             "classes per pixel", (1, 8), lambda: _randomise_batchnorm(UNetTiny()),
             _images(32), SCRIPT),
]
