"""LSTM and GRU layers compiled by Inductor (``fusion_compiler="inductor"``), against the
TorchScript interpreter: 1 and 2 layers, one and two directions, batch first or not, with
and without an initial state, two sequence lengths; and every way of falling back to ATen.

Compiling is slow (seconds per signature), so the layers are tiny, the sequences short, and
each model carries several layers at once."""

from __future__ import annotations

import warnings

import pytest
import torch
from torch import Tensor, nn

import static_runtime as sr
from static_runtime.ops import inductor
from static_runtime.ops.native import recurrent
from tests.differential import check

pytestmark = pytest.mark.skipif(inductor.compiler_available() is not None,
                                reason=str(inductor.compiler_available()))

INDUCTOR = sr.StaticModuleOptions(fusion_compiler="inductor")


class BatchFirst(nn.Module):
    """A 2-layer LSTM without initial state into a bidirectional GRU given one."""

    def __init__(self):
        super().__init__()
        self.lstm = nn.LSTM(5, 4, num_layers=2, batch_first=True)
        self.gru = nn.GRU(4, 3, bidirectional=True, batch_first=True)

    def forward(self, x: Tensor, h0: Tensor):
        out, (h, c) = self.lstm(x)
        out2, h2 = self.gru(out, h0)
        return out, h, c, out2, h2


class TimeFirst(nn.Module):
    """A bidirectional LSTM given its state into a 2-layer GRU without one, time first."""

    def __init__(self):
        super().__init__()
        self.lstm = nn.LSTM(5, 3, bidirectional=True)
        self.gru = nn.GRU(6, 4, num_layers=2)

    def forward(self, x: Tensor, h0: Tensor, c0: Tensor):
        out, (h, c) = self.lstm(x, (h0, c0))
        out2, h2 = self.gru(out)
        return out, h, c, out2, h2


@pytest.fixture
def compiles(monkeypatch):
    """Counts compilations and calls of compiled recurrences."""
    counts = {"compiles": 0, "calls": 0}
    real = inductor.compile_graph

    def counting(fn, example_inputs, **kw):
        compiled = real(fn, example_inputs, **kw)
        counts["compiles"] += 1

        def call(args):
            counts["calls"] += 1
            return compiled.call(args)

        return inductor.Compiled(call, compiled.source, compiled.seconds)

    monkeypatch.setattr(inductor, "compile_graph", counting)
    return counts


def _kinds(mod: sr.StaticModule) -> set[str]:
    return {n.kind for n in mod.graph.walk()}


def test_batch_first_two_lengths(compiles):
    torch.manual_seed(0)
    model = BatchFirst().eval()
    first = (torch.randn(2, 3, 5), torch.randn(2, 2, 3))
    second = (torch.randn(1, 5, 5), torch.randn(2, 1, 3))
    mods = check(model, first, second, options={"inductor": INDUCTOR})
    assert {"static_runtime::lstm", "static_runtime::gru"} <= _kinds(mods["inductor"])
    assert compiles["compiles"] == 4  # two layers' nodes × two signatures
    assert compiles["calls"] == 6  # three calls of each node


def test_time_first_bidirectional_lstm_two_layer_gru(compiles):
    torch.manual_seed(1)
    model = TimeFirst().eval()
    inputs = (torch.randn(4, 2, 5), torch.randn(2, 2, 3), torch.randn(2, 2, 3))
    check(model, inputs, options={"inductor": INDUCTOR})
    assert compiles["compiles"] == 2
    assert compiles["calls"] == 4


def test_compiled_again_for_another_intra_op_thread_count(compiles):
    # Inductor's kernels keep the OpenMP thread count they were compiled with
    torch.manual_seed(2)
    model = TimeFirst().eval()
    x = (torch.randn(3, 1, 5), torch.randn(2, 1, 3), torch.randn(2, 1, 3))
    mod = sr.StaticModule(torch.jit.script(model), options=INDUCTOR)
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        one = mod(*x)
        torch.set_num_threads(2)
        two = mod(*x)
    finally:
        torch.set_num_threads(before)
    torch.testing.assert_close(one, two)
    torch.testing.assert_close(one, model(*x))
    assert compiles["compiles"] == 4  # the LSTM's and the GRU's node, at each count


def test_off_by_default_and_with_compile_recurrent_off():
    model = torch.jit.script(BatchFirst().eval())
    for options in (sr.StaticModuleOptions(),
                    sr.StaticModuleOptions(fusion_compiler="inductor", compile_recurrent=False)):
        kinds = _kinds(sr.StaticModule(model, options=options))
        assert "aten::lstm" in kinds and "aten::gru" in kinds
        assert not {"static_runtime::lstm", "static_runtime::gru"} & kinds


def test_projection_and_nonconstant_weights_keep_aten():
    class Projected(nn.Module):
        def __init__(self):
            super().__init__()
            self.lstm = nn.LSTM(5, 4, proj_size=2)

        def forward(self, x: Tensor):
            return self.lstm(x)[0]

    def weights_as_input(x: Tensor, w_ih: Tensor, w_hh: Tensor, h: Tensor):
        return torch.gru(x, h, [w_ih, w_hh], False, 1, 0.0, False, False, False)[0]

    torch.manual_seed(2)
    for model in (Projected().eval(), weights_as_input):
        kinds = _kinds(sr.StaticModule(torch.jit.script(model), options=INDUCTOR))
        assert not {"static_runtime::lstm", "static_runtime::gru"} & kinds
    check(weights_as_input, (torch.randn(3, 1, 5), torch.randn(6, 5), torch.randn(6, 2),
                             torch.randn(1, 1, 2)), options={"inductor": INDUCTOR})


def test_refused_compile_warns_naming_the_node_and_runs_aten(monkeypatch):
    def refuse(fn, example_inputs, **kw):
        raise inductor.CompileRefused("no compiler here")

    monkeypatch.setattr(inductor, "compile_graph", refuse)
    torch.manual_seed(3)
    model = BatchFirst().eval()
    inputs = (torch.randn(2, 3, 5), torch.randn(2, 2, 3))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        check(model, inputs, options={"inductor": INDUCTOR})
    messages = [str(w.message) for w in caught if issubclass(w.category, RuntimeWarning)]
    assert any("static_runtime::lstm" in m and "no compiler here" in m for m in messages)
    assert any("static_runtime::gru" in m for m in messages)
    # once per node and signature, not per call
    assert len([m for m in messages if "static_runtime::lstm" in m]) == 1


def test_long_sequences_and_other_dtypes_run_aten(monkeypatch, compiles):
    monkeypatch.setattr(recurrent, "MAX_UNROLLED_STEPS", 4)
    torch.manual_seed(4)
    model = BatchFirst().eval()
    # 3 steps × 2 layers of the LSTM and 3 × 2 directions of the GRU: over the bound
    check(model, (torch.randn(1, 3, 5), torch.randn(2, 1, 3)), options={"inductor": INDUCTOR})
    double = torch.jit.script(Plain().eval())
    mod = sr.StaticModule(double, options=INDUCTOR)
    x = torch.randn(2, 1, 5, dtype=torch.float64)
    with pytest.raises(RuntimeError):
        double(x)  # float32 weights, float64 input: ATen's error
    with pytest.raises(RuntimeError):
        mod(x)
    assert compiles["compiles"] == 0


class Plain(nn.Module):
    def __init__(self):
        super().__init__()
        self.gru = nn.GRU(5, 3)

    def forward(self, x: Tensor):
        return self.gru(x)[0]


def test_weights_fit():
    lstm = nn.LSTM(5, 4, num_layers=2, bidirectional=True)
    weights = [w.detach() for w in lstm._flat_weights]
    assert recurrent.weights_fit("lstm", weights, True, 2, True) is None
    assert recurrent.weights_fit("lstm", weights, True, 1, True) is not None
    assert recurrent.weights_fit("gru", weights, True, 2, True) is not None
    assert recurrent.weights_fit("lstm", weights, False, 2, True) is not None
