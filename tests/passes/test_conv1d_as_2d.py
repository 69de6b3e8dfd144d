"""``conv1d_as_2d`` (``passes/conv1d.py``): chained 1-D convolutions become 2-D ones of height
1 in one channels-last region — their activations and residual adds fused as a conv net's,
the pads padding the 4-D view —; the answers equal TorchScript's on two shape sets (batched
and unbatched, strided, dilated, depthwise, a transposed input), outputs come back in eager's
layout; a convolution on its own, and the option off, leave ``conv1d`` as it was."""

import pytest
import torch
import torch.nn.functional as F
from differential import check, script
from measured import MEASURE, OPTIONS, needs_ckernels
from torch import Tensor, nn

import static_runtime as sr

pytestmark = needs_ckernels


class TemporalBlock(nn.Module):
    """A TCN block: two causal dilated convolutions with ReLU, the input added (through a
    1 × 1 convolution when the widths differ), ReLU."""

    def __init__(self, cin: int, cout: int, dilation: int):
        super().__init__()
        self.pad = 2 * dilation
        self.conv1 = nn.Conv1d(cin, cout, 3, padding=self.pad, dilation=dilation)
        self.conv2 = nn.Conv1d(cout, cout, 3, padding=self.pad, dilation=dilation)
        self.down = nn.Conv1d(cin, cout, 1) if cin != cout else None

    def forward(self, x: Tensor) -> Tensor:
        y = torch.relu(self.conv1(x)[:, :, :-self.pad].contiguous())
        y = torch.relu(self.conv2(y)[:, :, :-self.pad].contiguous())
        shortcut = x if self.down is None else self.down(x)
        return torch.relu(y + shortcut)


class TCN(nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.blocks = nn.Sequential(TemporalBlock(5, 16, 1), TemporalBlock(16, 16, 2),
                                    TemporalBlock(16, 16, 4))
        self.head = nn.Linear(16, 3)

    def forward(self, x: Tensor) -> Tensor:
        return self.head(self.blocks(x)[:, :, -1])


class Frontend(nn.Module):
    """An audio front end as Whisper's and wav2vec2's: strided convolutions with GELU, a
    depthwise one, a bias-free one, its (B, L, C) result permuted for a transformer."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(1)
        self.conv1 = nn.Conv1d(6, 12, 3, padding=1)
        self.conv2 = nn.Conv1d(12, 12, 5, stride=2, padding=2, groups=12)
        self.conv3 = nn.Conv1d(12, 8, 3, stride=2, bias=False)

    def forward(self, x: Tensor) -> Tensor:
        y = F.gelu(self.conv1(x))
        y = F.gelu(self.conv2(y)) * 0.5
        return self.conv3(y).permute(0, 2, 1) + 1.0


class Transposed(nn.Module):
    """Convolutions of a (B, L, C) input transposed to (B, C, L), as a Conformer's."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(2)
        self.conv1 = nn.Conv1d(8, 8, 3, padding=1)
        self.conv2 = nn.Conv1d(8, 4, 1)

    def forward(self, x: Tensor) -> Tensor:
        return self.conv2(torch.sigmoid(self.conv1(x.transpose(1, 2))))


def _series(*shape: int) -> list[Tensor]:
    return [torch.randn(*shape, generator=torch.Generator().manual_seed(sum(shape)))]


def _kinds(model: nn.Module, options: sr.StaticModuleOptions = MEASURE) -> list[str]:
    return [n.kind for n in sr.prepare(script(model), options).walk()]


def test_tcn_runs_as_one_channels_last_region():
    model = TCN().eval()
    kinds = _kinds(model)
    assert "aten::conv1d" not in kinds
    # (each block's second convolution takes its ReLU; the shortcut's add and the ReLU
    # after it go into a convolution of their own)
    assert kinds.count("static_runtime::conv2d_pointwise") + \
        kinds.count("static_runtime::conv2d_residual") == 7
    assert "static_runtime::conv2d_residual" in kinds
    assert kinds.count("static_runtime::layout_as") == 1  # (once, before the head's select)
    check(model, _series(2, 5, 40), _series(3, 5, 23), options=OPTIONS)


def test_unbatched_input():
    model = TCN().eval()
    check(model, _series(5, 40), _series(5, 17), options=OPTIONS)


def test_strided_depthwise_and_gelu():
    model = Frontend().eval()
    assert "aten::conv1d" not in _kinds(model)
    mods = check(model, _series(2, 6, 50), _series(1, 6, 31), options=OPTIONS)
    out = mods["measure"](*_series(2, 6, 50))
    ref = model(*_series(2, 6, 50))
    assert out.stride() == ref.stride()  # (eager's layout where it can be seen)


def test_transposed_input():
    model = Transposed().eval()
    assert "aten::conv1d" not in _kinds(model)
    mods = check(model, _series(2, 30, 8), _series(3, 7, 8), options=OPTIONS)
    out = mods["measure"](*_series(2, 30, 8))
    assert out.is_contiguous()


class Single(nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(3)
        self.conv = nn.Conv1d(4, 6, 3, padding=1)
        self.linear = nn.Linear(6, 2)

    def forward(self, x: Tensor) -> Tensor:
        return self.linear(torch.relu(self.conv(x)).mean(-1))


def test_a_convolution_on_its_own_keeps_conv1d():
    model = Single().eval()
    assert "aten::conv1d" in _kinds(model)
    check(model, _series(2, 4, 12), _series(1, 4, 5), options=OPTIONS)


@pytest.mark.parametrize("off", [{"conv1d_as_2d": False}, {"channels_last": False},
                                 {"fuse_convolution": False}])
def test_off_leaves_conv1d(off):
    options = sr.StaticModuleOptions(kernel_choice="measure", **off)
    kinds = _kinds(TCN().eval(), options)
    assert "aten::conv1d" in kinds and "aten::unsqueeze" not in kinds


def test_exported():
    model = TCN().eval()
    x = _series(2, 5, 40)[0]
    batch = torch.export.Dim("batch", min=1, max=64)
    program = torch.export.export(model, (x,), dynamic_shapes=({0: batch},))
    mod = sr.StaticModule(program, options=MEASURE)
    assert "aten::conv1d" not in [n.kind for n in mod.graph.walk()]
    for b in (2, 5):
        y = _series(b, 5, 40)[0]
        with torch.no_grad():
            torch.testing.assert_close(mod(y), model(y))
