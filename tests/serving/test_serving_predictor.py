"""``serving.Predictor`` and ``serving.load_model`` called directly, as a Ray Data actor calls
them (no Ray needed): numpy columns in, an output column out equal to direct calls; columns of
per-row arrays are stacked; tuple outputs give one column each; wrong columns, ragged rows and
outputs without one row per input are refused with a message; a .pt archive, a prepared module
and a factory all load."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from differential import script

import static_runtime as sr
from static_runtime.models import MODELS
from static_runtime.serving import Predictor, load_model


@pytest.fixture(scope="module")
def paths(tmp_path_factory):
    root = tmp_path_factory.mktemp("predictor")
    scripted = script(MODELS["mlp"].build())
    sr.StaticModule(scripted).save(root / "mlp.srm")
    torch.jit.save(scripted, str(root / "mlp.pt"))
    torch.jit.save(torch.jit.script(_TwoOutputs()), str(root / "two.pt"))
    return root


class _TwoOutputs(torch.nn.Module):
    def forward(self, a: torch.Tensor, b: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return a + b.unsqueeze(1), a.sum(1)


def test_predictor_output_column_equals_direct_calls(paths):
    x = np.random.default_rng(0).standard_normal((9, 64)).astype(np.float32)
    before = x.copy()
    direct = sr.load(paths / "mlp.srm")
    for source in (paths / "mlp.srm", str(paths / "mlp.pt")):
        p = Predictor(source, input_columns=["x"], output_column="y")
        out = p({"x": x, "id": np.arange(9)})
        assert list(out["id"]) == list(range(9))
        torch.testing.assert_close(torch.from_numpy(out["y"]), direct(torch.from_numpy(x)))
        rows = np.empty(9, dtype=object)                 # a list column: one array per row
        rows[:] = list(x)
        torch.testing.assert_close(torch.from_numpy(p({"x": rows})["y"]),
                                   direct(torch.from_numpy(x)))
    np.testing.assert_array_equal(x, before)


def test_predictor_tuple_outputs_and_two_columns(paths):
    p = Predictor(str(paths / "two.pt"), input_columns=["a", "b"])
    a = np.ones((4, 3), np.float32)
    b = np.arange(4, dtype=np.float32)
    out = p({"a": a, "b": b})
    np.testing.assert_allclose(out["output_0"], a + b[:, None])
    np.testing.assert_allclose(out["output_1"], a.sum(1))


def test_predictor_refusals_name_the_problem(paths):
    with pytest.raises(ValueError, match="non-empty list"):
        Predictor(paths / "mlp.srm", input_columns="x")
    p = Predictor(paths / "mlp.srm", input_columns=["x"])
    with pytest.raises(KeyError, match=r"\['x'\] not in the batch"):
        p({"z": np.zeros((2, 64), np.float32)})
    ragged = np.empty(2, dtype=object)
    ragged[:] = [np.zeros(64, np.float32), np.zeros(3, np.float32)]
    with pytest.raises(ValueError, match="different shapes"):
        p({"x": ragged})
    summing = Predictor(lambda: (lambda x: x.sum(0)), input_columns=["x"])
    with pytest.raises(ValueError, match="needs 2 rows"):
        summing({"x": np.zeros((2, 5), np.float32)})


def test_load_model_sources(paths):
    assert isinstance(load_model(paths / "mlp.srm"), sr.StaticModule)
    assert isinstance(load_model(str(paths / "mlp.pt")), sr.StaticModule)
    assert load_model(lambda: 7) == 7
    with pytest.raises(ValueError, match="prepared module"):
        load_model(paths / "mlp.srm", sr.StaticModuleOptions())
    with pytest.raises(FileNotFoundError, match="no such model file"):
        load_model(paths / "missing.srm")
    with pytest.raises(TypeError, match="must be a path"):
        load_model(3)
