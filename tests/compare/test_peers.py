"""The side-by-side harness: which runners exist, how refusals and caveats are reported,
how outputs are compared. Behaviour only; nothing here is timed."""

import math

import pytest
import torch
from torch import nn

from static_runtime import compare
from static_runtime.compare.onnx_peer import _ort_caller
from static_runtime.compare.runner import _reason, _refused
from static_runtime.models import MODELS

IN_PROCESS = ("eager", "torchscript", "optimize_for_inference", "pytorch_static_runtime",
              "static_runtime")


class Tiny(nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(8, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.linear(x))


class Branchy(nn.Module):
    """A branch on the data: tracing bakes in the side the example input takes."""

    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if bool(x.sum() > 0):
            return self.linear(x)
        return -x


def _tiny():
    torch.manual_seed(0)
    return Tiny().eval(), (torch.randn(2, 8),)


def test_runner_names_follow_include_and_all_agree():
    model, inputs = _tiny()
    runners = compare.make_runners(model, inputs, include=IN_PROCESS)
    assert [r.name for r in runners] == list(IN_PROCESS)
    assert all(not r.note and not r.caveats for r in runners)
    assert all(r.setup_seconds >= 0 and r.first_call_seconds >= 0 for r in runners)
    assert compare.outputs_agree(runners) == {name: True for name in IN_PROCESS}
    assert all(err is not None and err < 1e-5 for err in compare.output_errors(runners).values())


def test_default_runners_are_the_demo_ones():
    model, inputs = _tiny()
    names = [r.name for r in compare.make_runners(model, inputs)]
    assert names == list(compare.DEMO_RUNNERS)
    assert set(compare.RUNNERS) >= set(names)


def test_unknown_runner_is_an_error_not_a_refusal():
    model, inputs = _tiny()
    with pytest.raises(ValueError, match="unknown runner"):
        compare.make_runners(model, inputs, include=("eager", "tensorrt"))


def test_refused_peer_carries_a_note():
    # PyTorch's C++ Static Runtime refuses the encoder layer's tensor identity checks.
    spec = MODELS["transformer_encoder"]
    runners = compare.make_runners(spec.build(), spec.example_inputs(1),
                                   include=("eager", "pytorch_static_runtime"))
    refused = runners[1]
    assert refused.note and "canEnableStaticRuntime" in refused.note
    assert math.isnan(refused.setup_seconds)
    assert "error" in refused.details
    with pytest.raises(RuntimeError):
        refused.fn()
    assert compare.outputs_agree(runners) == {"eager": True, "pytorch_static_runtime": None}
    timings = compare.time_runners(runners, repeats=1, calls=1, warmup=0)
    assert set(timings) == {"eager"}


def test_outputs_agree_and_errors_see_a_wrong_runner():
    t = torch.ones(3)
    runners = [compare.Runner("eager", lambda: t, 0.0),
               compare.Runner("same", lambda: t.clone(), 0.0),
               compare.Runner("wrong", lambda: t + 1, 0.0),
               compare.Runner("shape", lambda: torch.ones(4), 0.0),
               compare.Runner("refused", _refused("no"), float("nan"), note="no")]
    assert compare.outputs_agree(runners) == {
        "eager": True, "same": True, "wrong": False, "shape": False, "refused": None}
    errors = compare.output_errors(runners)
    assert errors["same"] == 0.0 and errors["wrong"] == pytest.approx(1.0)
    assert errors["shape"] is None and errors["refused"] is None


def test_reason_names_the_innermost_cause():
    try:
        try:
            raise ValueError("\x1b[96mdata-dependent\x1b[0m branch\nmore detail")
        except ValueError as inner:
            raise RuntimeError("Export failed:\n") from inner
    except RuntimeError as e:
        assert _reason(e) == "RuntimeError <- ValueError: data-dependent branch"
    assert _reason(KeyError()) == "KeyError"


def test_torch_compile_runner_reports_compile_time_and_graph_breaks():
    # The eager backend keeps this fast; the benchmark uses inductor.
    torch.manual_seed(0)
    runners = compare.make_runners(Branchy().eval(), (torch.randn(2, 8),),
                                   include=("eager", "torch_compile"), compile_backend="eager")
    compiled = runners[1]
    assert not compiled.note
    assert compiled.details["backend"] == "eager"
    assert compiled.details["compile_seconds"] >= 0
    assert any("graph break" in c for c in compiled.caveats)
    assert compare.outputs_agree(runners)["torch_compile"] is True


def test_onnxruntime_runner_agrees_with_eager():
    pytest.importorskip("onnxruntime")
    pytest.importorskip("onnxscript")
    model, inputs = _tiny()
    runners = compare.make_runners(model, inputs, include=("eager", "onnxruntime"),
                                   check_inputs=[(-inputs[0],)])
    ort = runners[1]
    assert not ort.note, ort.note
    assert ort.details["exporter"] == "dynamo"
    assert ort.details["export_seconds"] > 0
    assert sum(ort.details["onnx_ops"].values()) >= 1  # op type -> count
    assert compare.outputs_agree(runners)["onnxruntime"] is True


def test_onnx_export_that_traces_one_branch_is_not_chosen():
    pytest.importorskip("onnxruntime")
    pytest.importorskip("onnxscript")
    torch.manual_seed(0)
    x = torch.rand(2, 8)  # positive sum: the linear branch
    runners = compare.make_runners(Branchy().eval(), (x,), include=("eager", "onnxruntime"),
                                   check_inputs=[(-x,)])
    ort = runners[1]
    assert not ort.note, ort.note
    # torch.export refuses the data-dependent branch; the scripted module keeps it as If.
    assert ort.details["exporter"] == "torchscript_scripted"
    assert any(c.startswith("dynamo exporter:") for c in ort.caveats)
    assert not any("lossy" in c for c in ort.caveats)
    assert compare.outputs_agree(runners)["onnxruntime"] is True


class KeywordOnly(nn.Module):
    """A forward ``torch.jit.script`` refuses (``**kwargs``): such models are traced."""

    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(8, 4)

    def forward(self, x: torch.Tensor, **kwargs) -> torch.Tensor:
        return torch.relu(self.linear(x)) * kwargs.get("scale", 1.0)


def test_runners_use_the_scripted_module_given():
    torch.manual_seed(0)
    model, x = KeywordOnly().eval(), torch.randn(3, 8)
    with pytest.raises(Exception):  # noqa: B017  (whichever error scripting raises)
        torch.jit.script(model)
    traced = torch.jit.trace(model, (x,))
    runners = compare.make_runners(model, (x,), include=IN_PROCESS, scripted=traced)
    assert [r.note for r in runners] == [""] * len(IN_PROCESS)
    assert all(compare.outputs_agree(runners).values())
    # the runners froze their own copies: the module given still has its weights as attributes
    assert isinstance(traced.linear.weight, torch.Tensor)
    torch.testing.assert_close(traced(x), model(x))


class _FakeSession:
    """What ``_ort_caller`` uses of an ``onnxruntime.InferenceSession``."""

    class _Arg:
        def __init__(self, name: str, type_: str):
            self.name, self.type = name, type_

    def __init__(self, outputs: list):
        self.outputs = outputs

    def get_inputs(self):
        return [self._Arg("x", "tensor(float)")]

    def get_outputs(self):
        return [self._Arg(f"out{k}", "") for k in range(len(self.outputs))]

    def run(self, names, feed):
        return self.outputs


def test_onnx_outputs_take_eager_structure():
    import numpy as np

    x = torch.ones(2)
    y, steps = np.full((2,), 3.0, dtype=np.float32), np.array(7)
    # (Tensor, int): ONNX returns the int as a 0-d tensor
    call = _ort_caller(_FakeSession([y, steps]), (x,), (torch.zeros(2), 5))
    got = call((x,))
    assert isinstance(got, tuple) and isinstance(got[1], int) and got[1] == 7
    torch.testing.assert_close(got[0], torch.full((2,), 3.0))
    # a 1-tuple stays a tuple
    got = _ort_caller(_FakeSession([y]), (x,), (torch.zeros(2),))((x,))
    assert isinstance(got, tuple) and len(got) == 1
    # structures that do not match the outputs: bare tensor or tuple, as before
    got = _ort_caller(_FakeSession([y, y]), (x,), torch.zeros(2))((x,))
    assert isinstance(got, tuple) and len(got) == 2


def test_onnxruntime_runner_on_a_model_returning_a_one_tuple():
    pytest.importorskip("onnxruntime")
    pytest.importorskip("onnxscript")

    class OneTuple(nn.Module):
        def forward(self, x: torch.Tensor) -> tuple[torch.Tensor]:
            return (torch.relu(x),)

    x = torch.randn(2, 8)
    runners = compare.make_runners(OneTuple().eval(), (x,), include=("eager", "onnxruntime"))
    assert not runners[1].note, runners[1].note
    assert compare.outputs_agree(runners)["onnxruntime"] is True
