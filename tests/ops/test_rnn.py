"""The measured ``aten::lstm`` / ``aten::gru`` and their cells (``ops/rnn.py``): differential
against TorchScript on two input shape sets whichever kernel wins, each kernel forced, our
kernels against ATen's, and ATen's operator for what the measured one does not claim."""

import re

import pytest
import torch
from differential import check
from measured import MEASURE, OPTIONS, fresh_kernel_cache, needs_ckernels  # noqa: F401
from torch import nn

import static_runtime as sr
from static_runtime.ops.ckernels.layers import Cell, Recurrent
from static_runtime.ops.kernels import Choice, KernelChooser

pytestmark = needs_ckernels


class Recurrents(nn.Module):
    """A 2-layer LSTM from zero states, a bidirectional GRU from a given state (time first,
    no biases), and their outputs and final states."""

    def __init__(self):
        super().__init__()
        self.lstm = nn.LSTM(6, 20, num_layers=2, batch_first=True)
        self.gru = nn.GRU(20, 17, bidirectional=True, bias=False)

    def forward(self, x, h0):
        y, (h, c) = self.lstm(x)
        z, hg = self.gru(y.transpose(0, 1).contiguous(), h0)
        return z, h + 1, c * 2, hg


def _inputs():
    torch.manual_seed(7)
    return ([torch.randn(1, 9, 6), torch.randn(2, 1, 17)],
            [torch.randn(3, 4, 6), torch.randn(2, 3, 17)])


def test_differential_two_shape_sets():
    first, second = _inputs()
    mod = check(Recurrents().eval(), first, second, options=OPTIONS)["measure"]
    labels = [pn.impl.label for pn in mod.plan.nodes() if pn.kind in ("aten::lstm", "aten::gru")]
    assert len(labels) == 2 and all("by measurement" in label for label in labels)
    assert "B<=4 T<=4 threads=" in mod.describe()


def test_new_lengths_of_a_measured_bucket_measure_nothing():
    # Traffic of every length: sequence lengths up to the same power of two share a choice
    # (each length measured on its own cost ~20 ms a node on its first call).
    model = Recurrents().eval()
    mod = sr.StaticModule(torch.jit.script(model), MEASURE)
    torch.manual_seed(3)
    measured = []
    for steps in (5, 6, 7, 8, 6):
        x, h0 = torch.randn(1, steps, 6), torch.randn(2, 1, 17)
        before = x.clone()
        for got, want in zip(mod(x, h0), model(x, h0)):
            torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)
        assert torch.equal(x, before)
        measured.append(mod.kernels.measured)
    assert measured[0] > 0 and len(set(measured)) == 1, measured


@pytest.mark.parametrize("name", ["aten", "native"])
def test_each_kernel_forced(name, monkeypatch):
    monkeypatch.setattr(KernelChooser, "choose",
                        lambda self, key, names, make, default: Choice(name, {}, "forced"))
    first, second = _inputs()
    mod = check(Recurrents().eval(), first, second, options={"measure": MEASURE})["measure"]
    assert mod.describe().count(f": {name} (forced)") >= 2


class _Gru(nn.Module):
    def __init__(self):
        super().__init__()
        self.gru = nn.GRU(5, 8)

    def forward(self, x, h0):
        return self.gru(x, h0)[0]


def test_unbatched_and_non_contiguous_inputs():
    """nn.GRU gives an unbatched input a batch of one (measured); a non-contiguous input (a
    conv net's output transposed) is measured too, ours on a contiguous copy of it."""
    model = _Gru().eval()
    mod = sr.StaticModule(torch.jit.script(model), MEASURE)
    x, h0 = torch.randn(4, 5), torch.randn(1, 8)  # (T, input): no batch dimension
    with torch.inference_mode():
        torch.testing.assert_close(mod(x, h0), model(x, h0))
        assert mod.kernels.measured == 1
        x3, h3 = torch.randn(5, 2, 4).permute(2, 1, 0), torch.randn(1, 2, 8)  # (4, 2, 5)
        assert not x3.is_contiguous()
        before = x3.clone()
        torch.testing.assert_close(mod(x3, h3), model(x3, h3))
        torch.testing.assert_close(mod(x3, h3), model(x3, h3))
        assert mod.kernels.measured == 2 and torch.equal(x3, before)


@pytest.mark.parametrize("mode", ["lstm", "gru"])
@pytest.mark.parametrize("layers,bidirectional,batch_first,bias",
                         [(1, False, False, True), (2, True, True, True), (3, True, False, False)])
def test_recurrent_kernel_matches_atens(mode, layers, bidirectional, batch_first, bias):
    torch.manual_seed(layers)
    cls = nn.LSTM if mode == "lstm" else nn.GRU
    layer = cls(13, 35, num_layers=layers, bidirectional=bidirectional, batch_first=batch_first,
                bias=bias).eval()
    kernel = Recurrent(mode, [w.detach() for w in layer._flat_weights], bias, layers,
                                bidirectional, batch_first)
    dirs = 2 if bidirectional else 1
    for batch, steps in ((1, 11), (5, 3)):  # two shape sets
        x = torch.randn(batch, steps, 13) if batch_first else torch.randn(steps, batch, 13)
        h0, c0 = torch.randn(layers * dirs, batch, 35), torch.randn(layers * dirs, batch, 35)
        before = [t.clone() for t in (x, h0, c0)]
        with torch.inference_mode():
            expected = layer(x, (h0, c0)) if mode == "lstm" else layer(x, h0)
            got = kernel(x, h0, c0) if mode == "lstm" else kernel(x, h0)
        flat = [expected[0], *(expected[1] if mode == "lstm" else (expected[1],))]
        assert len(got) == len(flat)
        for g, e in zip(got, flat):
            torch.testing.assert_close(g, e, rtol=1e-5, atol=1e-5)
        again = kernel(x, h0, c0) if mode == "lstm" else kernel(x, h0)
        for a, g in zip(again, got):
            assert torch.equal(a, g)
        assert all(torch.equal(a, b) for a, b in zip((x, h0, c0), before))


def test_recurrent_kernel_refuses_what_it_cannot_take():
    layer = nn.GRU(4, 6).eval()
    kernel = Recurrent("gru", [w.detach() for w in layer._flat_weights], True, 1,
                                False, False)
    with pytest.raises(ValueError, match="contiguous float32 CPU"):
        kernel(torch.randn(3, 2, 5), torch.zeros(1, 2, 6))
    with pytest.raises(ValueError, match="h0 must be float32"):
        kernel(torch.randn(3, 2, 4), torch.zeros(1, 3, 6))


class Cells(nn.Module):
    """A GRUCell and an LSTMCell stepped over the time axis (as a greedy decoder steps its
    cell), the GRU without biases."""

    def __init__(self):
        super().__init__()
        self.gru = nn.GRUCell(6, 20, bias=False)
        self.lstm = nn.LSTMCell(20, 17)

    def forward(self, x, h, c):
        g = torch.zeros(x.size(1), 20)
        outs: list[torch.Tensor] = []
        for t in range(x.size(0)):
            g = self.gru(x[t].contiguous(), g)
            h, c = self.lstm(g, (h, c))
            outs.append(h)
        return torch.stack(outs), g, c


def _cell_inputs():
    torch.manual_seed(3)
    return ([torch.randn(4, 1, 6), torch.randn(1, 17), torch.randn(1, 17)],
            [torch.randn(3, 5, 6), torch.randn(5, 17), torch.randn(5, 17)])


def test_cells_differential_two_shape_sets():
    first, second = _cell_inputs()
    mod = check(Cells().eval(), first, second, options=OPTIONS)["measure"]
    labels = [pn.impl.label for pn in mod.plan.nodes()
              if pn.kind in ("aten::gru_cell", "aten::lstm_cell")]
    assert len(labels) == 2 and all("by measurement" in label for label in labels), labels
    assert "x=(8, 20) threads=" in mod.describe()  # batch 5's bucket, the LSTM cell's input


@pytest.mark.parametrize("name", ["aten", "native"])
def test_cells_each_kernel_forced(name, monkeypatch):
    monkeypatch.setattr(KernelChooser, "choose",
                        lambda self, key, names, make, default: Choice(name, {}, "forced"))
    first, second = _cell_inputs()
    mod = check(Cells().eval(), first, second, options={"measure": MEASURE})["measure"]
    assert mod.describe().count(f": {name} (forced)") >= 2


@pytest.mark.parametrize("mode", ["lstm", "gru"])
@pytest.mark.parametrize("bias", [True, False])
def test_cell_kernel_matches_atens(mode, bias):
    torch.manual_seed(bias)
    cell = (nn.LSTMCell if mode == "lstm" else nn.GRUCell)(13, 35, bias=bias).eval()
    kernel = Cell(mode, cell.weight_ih.detach(), cell.weight_hh.detach(),
                  cell.bias_ih.detach() if bias else None,
                  cell.bias_hh.detach() if bias else None)
    for batch in (1, 9):  # two shape sets
        x, h, c = torch.randn(batch, 13), torch.randn(batch, 35), torch.randn(batch, 35)
        before = [t.clone() for t in (x, h, c)]
        call = kernel.direct(batch)
        with torch.inference_mode():
            expected = cell(x, (h, c)) if mode == "lstm" else (cell(x, h),)
            got = call(x, h, c) if mode == "lstm" else (call(x, h),)
        for g, e in zip(got, expected, strict=True):
            torch.testing.assert_close(g, e, rtol=1e-5, atol=1e-5)
        again = call(x, h, c) if mode == "lstm" else (call(x, h),)
        assert all(torch.equal(a, g) for a, g in zip(again, got))
        assert all(torch.equal(a, b) for a, b in zip((x, h, c), before))


def test_cell_kernel_refuses_weights_that_do_not_fit():
    cell = nn.GRUCell(4, 6)
    with pytest.raises(ValueError, match="do not fit a hidden size of 6"):
        Cell("gru", cell.weight_ih.detach()[:9], cell.weight_hh.detach(), None, None)
    with pytest.raises(ValueError, match="runs 'lstm' or 'gru'"):
        Cell("rnn", cell.weight_ih.detach(), cell.weight_hh.detach(), None, None)


class _GruCell(nn.Module):
    def __init__(self):
        super().__init__()
        self.cell = nn.GRUCell(5, 8)

    def forward(self, x, h):
        return self.cell(x, h)


def test_cell_unbatched_strided_and_mistyped_inputs():
    """An unbatched input (nn.GRUCell makes it 2-D: measured) and a non-contiguous one
    (ATen's cell, nothing measured) give eager's answer; a float64 input eager's error."""
    model = _GruCell().eval()
    mod = sr.StaticModule(torch.jit.script(model), MEASURE)
    with torch.inference_mode():
        x, h = torch.randn(5), torch.randn(8)
        torch.testing.assert_close(mod(x, h), model(x, h))
        assert mod.kernels.measured == 1
        xs, hs = torch.randn(5, 3).t(), torch.randn(3, 8)
        assert not xs.is_contiguous()
        torch.testing.assert_close(mod(xs, hs), model(xs, hs))
        assert mod.kernels.measured == 1
        x64, h64 = torch.randn(2, 5, dtype=torch.float64), torch.randn(2, 8, dtype=torch.float64)
        with pytest.raises(RuntimeError) as eager_error:
            model(x64, h64)
        with pytest.raises(RuntimeError, match=re.escape(str(eager_error.value).split("\n")[0][:40])):
            mod(x64, h64)


def test_strided_input_forced_native(monkeypatch):
    """A layer fed a conv net's (B, C, T) output transposed: ours runs on a contiguous copy
    (forced), and gives eager's answer with the input untouched."""
    monkeypatch.setattr(KernelChooser, "choose",
                        lambda self, key, names, make, default: Choice("native", {}, "forced"))
    model = _Gru().eval()
    mod = sr.StaticModule(torch.jit.script(model), MEASURE)
    with torch.inference_mode():
        for steps in (4, 9):  # two shape sets
            x, h = torch.randn(5, 2, steps).permute(2, 1, 0), torch.randn(1, 2, 8)
            before = x.clone()
            torch.testing.assert_close(mod(x, h), model(x, h), rtol=1e-5, atol=1e-5)
            assert torch.equal(x, before)
    assert "native (forced)" in mod.describe()
