"""``static-runtime bench`` with ONNX Runtime and ``torch.compile`` beside the other runtimes:
their rows for a TorchScript archive and a torch.export archive, ONNX Runtime missing, and an
ONNX export that fails — one line under the table, nothing else printed, on the real file
descriptors too (the TorchScript-based exporter prints the graph from C++ at a failure)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from click.testing import CliRunner

from static_runtime.cli import main

ROOT = Path(__file__).resolve().parents[2]
FAST = ["--repeats", "2", "--warmup", "1", "--runs", "2"]


class _MLP(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b = torch.nn.Linear(16, 32), torch.nn.Linear(32, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.b(torch.relu(self.a(x)))


class _NoOnnx(torch.nn.Module):
    """``special_i0e``: no ONNX exporter converts it; ours runs it."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.special.i0e(x) + 1


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("peers")
    torch.manual_seed(0)
    mlp = _MLP().eval()
    paths = {"mlp_pt": d / "mlp.pt", "mlp_pt2": d / "mlp.pt2", "no_onnx_pt": d / "no_onnx.pt",
             "no_onnx_pt2": d / "no_onnx.pt2"}
    torch.jit.save(torch.jit.script(mlp), str(paths["mlp_pt"]))
    torch.export.save(torch.export.export(mlp, (torch.randn(2, 16),)), str(paths["mlp_pt2"]))
    torch.jit.save(torch.jit.script(_NoOnnx()), str(paths["no_onnx_pt"]))
    torch.export.save(torch.export.export(_NoOnnx(), (torch.randn(2, 16),)),
                      str(paths["no_onnx_pt2"]))
    return paths


def _bench_json(path: Path, *extra: str) -> dict[str, dict]:
    result = CliRunner().invoke(main, ["bench", str(path), *extra, *FAST, "--json"])
    assert result.exit_code == 0, (result.stderr, result.exception)
    report = json.loads(result.stdout)
    return {r["name"]: r for r in report["results"][0]["runners"]}


@pytest.mark.parametrize("kind", ["mlp_pt", "mlp_pt2"])
def test_onnxruntime_runs_beside_the_others(files, kind):
    pytest.importorskip("onnxruntime")
    if kind == "mlp_pt2":
        pytest.importorskip("onnxscript")
    extra = ["--input", "2x16:float32"] if kind == "mlp_pt" else []
    rows = _bench_json(files[kind], *extra)
    ort = rows["onnxruntime"]
    assert ort["note"] is None, ort["note"]
    assert ort["agrees"] is True and ort["us_per_call"] > 0
    assert ort["onnx_exporter"] == ("torchscript_scripted" if kind == "mlp_pt" else "dynamo")
    assert ort["total_bytes"] is None  # its allocator is not PyTorch's: not shown as 0
    assert ort["ours_over_this_time"] == pytest.approx(
        rows["static_runtime"]["us_per_call"] / ort["us_per_call"])


def test_torch_compile_runs_an_exported_program_and_refuses_an_archive(files):
    rows = _bench_json(files["mlp_pt2"])
    compiled = rows["torch_compile"]
    assert compiled["note"] is None and compiled["agrees"] is True
    assert compiled["setup_seconds"] > 0
    rows = _bench_json(files["mlp_pt"], "--input", "2x16:float32")
    assert "torch.jit.script" in rows["torch_compile"]["note"]
    assert "\n" not in rows["torch_compile"]["note"]


def test_onnxruntime_not_installed_is_a_note(files, monkeypatch):
    monkeypatch.setitem(sys.modules, "onnxruntime", None)  # import fails
    rows = _bench_json(files["mlp_pt"], "--input", "2x16:float32")
    assert "onnxruntime is not installed" in rows["onnxruntime"]["note"]
    assert rows["static_runtime"]["agrees"] is True


@pytest.mark.parametrize("kind", ["no_onnx_pt", "no_onnx_pt2"])
def test_an_export_that_fails_is_one_line(files, kind):
    pytest.importorskip("onnxruntime")
    pytest.importorskip("onnxscript")
    extra = ["--input", "2x16:float32"] if kind == "no_onnx_pt" else []
    proc = subprocess.run([sys.executable, "-m", "static_runtime", "bench", str(files[kind]),
                           *extra, *FAST], cwd=ROOT, capture_output=True, text=True,
                          check=False)
    assert proc.returncode == 0, proc.stderr
    text = proc.stdout + proc.stderr
    assert "Traceback" not in text and "Torch IR graph" not in text, text
    assert "[torch.onnx]" not in text, text  # the dynamo exporter's progress lines
    lines = " ".join(proc.stdout.split())  # the console wraps long lines: joined
    refused = "ONNX Runtime cannot run the model:"
    assert lines.count(refused) == 1, proc.stdout
    reason = lines.split(refused, 1)[1]
    assert ("i0e" in reason.split("torch.compile")[0]), reason
