"""The ``static-runtime`` command: each command on small models saved to a temporary
directory — what it prints, the JSON it writes, the PNG files it draws — and the one-line
errors a person gets for a missing file, a file that is not a model, inputs that do not fit
the signature and an operator nothing can run."""

from __future__ import annotations

import json
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
import torch
from click.testing import CliRunner
from differential import script
from matplotlib.image import imread

import static_runtime as sr
from static_runtime.cli import main
from static_runtime.cli.charts import CHART_DPI, CHART_SIZE_INCHES
from static_runtime.models import MODELS
from static_runtime.passes.pipeline import PASS_ORDER

FAST = ["--repeats", "2", "--warmup", "1"]
ROOT = Path(__file__).resolve().parent.parent

_LIB = torch.library.Library("sr_test_cli", "DEF")
_LIB.define("mutate_list(int[](a!) x) -> ()")
_LIB.impl("mutate_list", lambda x: None, "CompositeExplicitAutograd")


class _UsesMutateList(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        xs = [1, 2]
        torch.ops.sr_test_cli.mutate_list(xs)
        return x + xs[0]


@pytest.fixture(scope="module")
def models(tmp_path_factory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("models")
    paths = {}
    for name in ("mlp", "control_flow"):
        paths[name] = d / f"{name}.pt"
        torch.jit.save(script(MODELS[name].build()), str(paths[name]))
    paths["unsupported"] = d / "unsupported.pt"
    torch.jit.save(script(_UsesMutateList()), str(paths["unsupported"]))
    paths["state_dict"] = d / "weights.pt"
    torch.save(MODELS["mlp"].build().state_dict(), paths["state_dict"])
    paths["text"] = d / "notes.pt"
    paths["text"].write_text("not a model")
    paths["control_flow_inputs"] = d / "cf_inputs.pt"
    torch.save(MODELS["control_flow"].example_inputs(2), paths["control_flow_inputs"])
    return paths


@pytest.fixture(scope="module")
def exported(tmp_path_factory) -> dict[str, Path]:
    """torch.export archives: the built-in MLP with a dynamic batch, nn.Linear exported with a
    static batch of 2, and the MLP again without its example inputs."""
    d = tmp_path_factory.mktemp("exported")
    batch = torch.export.Dim("batch", min=1, max=64)
    mlp = MODELS["mlp"].build().eval()
    ep = torch.export.export(mlp, MODELS["mlp"].example_inputs(2),
                             dynamic_shapes=({0: batch},))
    paths = {"mlp": d / "mlp.pt2", "linear": d / "linear.pt2", "bare": d / "bare.pt2"}
    torch.export.save(ep, str(paths["mlp"]))
    ep.example_inputs = None
    torch.export.save(ep, str(paths["bare"]))
    linear = torch.nn.Linear(3, 4).eval()
    torch.export.save(torch.export.export(linear, (torch.randn(2, 3),)), str(paths["linear"]))
    return paths


def run(*args: str) -> tuple[int, str, str, BaseException | None]:
    result = CliRunner().invoke(main, [str(a) for a in args])
    return result.exit_code, result.stdout, result.stderr, result.exception


def _png_size(path: Path) -> tuple[int, int]:
    """(width, height) in pixels; imread fails on anything that is not a valid PNG."""
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    image = imread(path)
    return image.shape[1], image.shape[0]


# --------------------------------------------------------------------------- help


def test_help_explains_every_command():
    code, out, _, _ = run("--help")
    assert code == 0
    for command in ("demo", "bench", "profile", "inspect"):
        assert command in out
        code, sub, _, _ = run(command, "--help")
        assert code == 0 and len(sub.split()) > 40, command


def test_python_dash_m_runs_the_same_command():
    proc = subprocess.run([sys.executable, "-m", "static_runtime", "--help"], cwd=ROOT,
                          capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr
    assert "static-runtime" in proc.stdout and "profile" in proc.stdout


# --------------------------------------------------------------------------- demo


def test_demo_table_shows_latency_memory_and_agreement():
    code, out, err, exc = run("demo", "--model", "mlp", "--calls", "3", *FAST)
    assert code == 0, (out, err, exc)
    for title in ("eager PyTorch", "TorchScript", "PyTorch C++ Static Runtime",
                  "static_runtime (ours)"):
        assert title in out
    assert "µs/call" in out and "memory/call" in out and "held" in out
    assert "NO" not in out


def test_demo_json():
    code, out, err, exc = run("demo", "--model", "mlp", "--batch", "4", "--calls", "3",
                              *FAST, "--json")
    assert code == 0, (err, exc)
    report = json.loads(out)
    rows = {r["name"]: r for r in report["runners"]}
    assert set(rows) == {"eager", "torchscript", "pytorch_static_runtime", "static_runtime"}
    for r in rows.values():
        assert r["agrees"] is True and r["us_per_call"] > 0 and len(r["samples_us"]) == 2
        # a batch-4 MLP call allocates at least its 4x64 float output
        assert r["peak_bytes"] >= 4 * 64 * 4
        assert r["total_bytes"] == r["peak_bytes"] + r["held_bytes"]
    ours = rows["static_runtime"]
    assert ours["held_bytes"] > 0, "our arena is held between calls"
    assert ours["ours_over_this_time"] == 1.0 and ours["ours_over_this_memory"] == 1.0


def test_demo_refuses_unknown_model():
    code, _, err, _ = run("demo", "--model", "nope")
    assert code != 0 and "dlrm" in err


# --------------------------------------------------------------------------- bench


def test_bench_json_over_batch_sizes(models):
    code, out, err, exc = run("bench", models["mlp"], "--input", "Bx64:float32",
                              "--batch-sizes", "1,3", "--runs", "3", *FAST, "--json")
    assert code == 0, (err, exc)
    report = json.loads(out)
    assert report["reference"] == "torchscript"
    assert any("eager PyTorch is not available" in n for n in report["notes"])
    assert [r["batch"] for r in report["results"]] == [1, 3]
    assert report["results"][1]["inputs"] == "3x64:float32"
    for result in report["results"]:
        rows = {r["name"]: r for r in result["runners"]}
        assert set(rows) == {"torchscript", "torchscript_frozen", "pytorch_static_runtime",
                             "onnxruntime", "torch_compile", "static_runtime"}
        assert "torch.jit.script" in rows["torch_compile"]["note"]  # it refuses TorchScript
        assert all(r["agrees"] is True for r in rows.values() if not r["note"])
        assert rows["static_runtime"]["held_bytes"] > 0


def test_bench_untuned_adds_ours_with_the_earlier_defaults(models, tmp_path, monkeypatch):
    monkeypatch.setenv("STATIC_RUNTIME_CACHE_DIR", str(tmp_path))
    code, out, err, exc = run("bench", models["mlp"], "--input", "4x64:float32", "--runs", "3",
                              *FAST, "--untuned", "--json")
    assert code == 0, (err, exc)
    rows = {r["name"]: r for r in json.loads(out)["results"][0]["runners"]}
    untuned = rows["static_runtime_untuned"]
    assert untuned["agrees"] is True and not untuned["note"]
    assert rows["static_runtime"]["agrees"] is True


def test_bench_table_with_inputs_file(models):
    code, out, err, exc = run("bench", models["control_flow"], "--inputs-file",
                              models["control_flow_inputs"], "--runs", "2", *FAST)
    assert code == 0, (err, exc)
    assert "static_runtime (ours)" in out and "PyTorch C++ Static Runtime" in out
    assert "eager PyTorch is not available from a TorchScript archive" in out
    assert "2x32:float32" in out


def test_bench_batch_sizes_need_a_batch_dimension(models):
    code, _, err, _ = run("bench", models["mlp"], "--input", "1x64:float32",
                          "--batch-sizes", "1,2")
    assert code == 1 and "B dimension" in err


def test_bench_exported_program_json_over_batch_sizes(exported):
    code, out, err, exc = run("bench", exported["mlp"], "--input", "Bx64:float32",
                              "--batch-sizes", "1,3", "--runs", "3", *FAST, "--json")
    assert code == 0, (err, exc)
    report = json.loads(out)
    assert report["reference"] == "eager" and report["format"] == "torch.export"
    assert any("cannot run an exported program" in n for n in report["notes"])
    assert [r["batch"] for r in report["results"]] == [1, 3]
    assert [r["inputs"] for r in report["results"]] == ["1x64:float32", "3x64:float32"]
    for result in report["results"]:
        rows = {r["name"]: r for r in result["runners"]}
        assert set(rows) == {"eager", "onnxruntime", "torch_compile", "static_runtime"}
        ran = [r for r in rows.values() if not r["note"]]
        assert {"eager", "torch_compile", "static_runtime"} <= {r["name"] for r in ran}
        assert all(r["agrees"] is True and r["max_abs_error"] < 1e-5 for r in ran)
        assert rows["static_runtime"]["held_bytes"] > 0


def test_bench_exported_program_table_on_its_example_inputs(exported):
    code, out, err, exc = run("bench", exported["linear"], "--runs", "3", *FAST)
    assert code == 0, (err, exc)
    out = " ".join(out.split())  # lines wrapped at the console's width, joined
    assert "eager PyTorch" in out and "static_runtime (ours)" in out
    assert "inputs 2x3:float32 (the example inputs the program was exported with)" in out
    assert "TorchScript and PyTorch's C++ Static Runtime cannot run an exported program" in out
    assert "NO" not in out


def test_bench_exported_program_with_a_static_batch(exported):
    code, _, err, exc = run("bench", exported["linear"], "--input", "Bx3:float32",
                            "--batch-sizes", "2,5", "--runs", "3", *FAST)
    line = _one_line_error(code, err, exc)
    assert "batch size 5 is refused" in line and "expected shape (2, 3)" in line
    assert "dynamic_shapes" in line


def test_bench_exported_program_that_records_no_example_inputs(exported):
    code, _, err, exc = run("bench", exported["bare"], "--runs", "3", *FAST)
    line = _one_line_error(code, err, exc)
    assert "forward(x: Tensor)" in line and "records no example inputs" in line
    assert "--input" in line


# --------------------------------------------------------------------------- profile


def test_profile_prints_metrics_and_draws_chart(models, tmp_path):
    chart = tmp_path / "kinds.png"
    code, out, err, exc = run("profile", models["mlp"], "--input", "2x64:float32",
                              "--runs", "5", "--warmup", "1", "--chart", chart,
                              "--no-overhead")
    assert code == 0, (err, exc)
    # (measured kernels, the default: each linear takes its relu along)
    for text in ("first call", "memory setup", "time per node kind",
                 "static_runtime::linear_pointwise", "out variant", "slowest", "arena"):
        assert text in out, text
    w, h = CHART_SIZE_INCHES
    assert _png_size(chart) == (round(w * CHART_DPI), round(h * CHART_DPI))


def test_profile_json_is_consistent(models):
    code, out, err, exc = run("profile", models["control_flow"], "--input", "3x32:float32",
                              "--runs", "3", "--warmup", "1", "--executor", "interpreter",
                              "--json")
    assert code == 0, (err, exc)
    report = json.loads(out)
    mod = sr.StaticModule(str(models["control_flow"]))
    top = mod.plan.block.nodes
    nodes = report["nodes"]
    assert [n["kind"] for n in nodes] == [pn.kind for pn in top]
    assert sum(n["percent"] for n in nodes) == pytest.approx(100.0)
    assert {k["kind"] for k in report["node_kinds"]} == {pn.kind for pn in top}
    assert any(n["tier"] == "control flow" for n in nodes)
    m = report["metrics_ms"]
    assert m["total_nodes_count"] == len(top) and len(m["time_per_node"]) == len(top)
    over = report["overhead"]
    assert over["untimed_ms"] > 0 and over["timed_ms"] > 0 and over["nodes"] == len(top)


def test_profile_exported_program(exported, tmp_path):
    chart = tmp_path / "kinds.png"
    code, out, err, exc = run("profile", exported["mlp"], "--input", "3x64:float32",
                              "--runs", "3", "--warmup", "1", "--no-overhead", "--chart",
                              chart, "--json")
    assert code == 0, (err, exc)
    report = json.loads(out)
    top = sr.StaticModule(str(exported["mlp"])).plan.block.nodes
    assert report["inputs"] == "3x64:float32"
    assert [n["kind"] for n in report["nodes"]] == [pn.kind for pn in top]
    assert {k["kind"] for k in report["node_kinds"]} == {"static_runtime::linear_pointwise"}
    assert report["metrics_ms"]["out_nodes_count"] == 3
    w, h = CHART_SIZE_INCHES
    assert _png_size(chart) == (round(w * CHART_DPI), round(h * CHART_DPI))


def test_profile_against_cpp_table(models):
    code, out, err, exc = run("profile", models["mlp"], "--input", "2x64:float32",
                              "--against", "cpp", "--repeats", "2", "--runs", "3",
                              "--warmup", "1", "--kernel-choice", "default")
    assert code == 0, (err, exc)
    out = " ".join(out.split())
    for text in ("ours against C++ SR", "aten::linear", "aten::relu (aten::relu_)",
                 "(outside the nodes)", "total per call", "cost µs/call"):
        assert text in out, text
    assert "refuses" not in out


def test_profile_against_cpp_json_is_consistent(models):
    code, out, err, exc = run("profile", models["mlp"], "--input", "2x64:float32",
                              "--against", "cpp", "--repeats", "2", "--runs", "3",
                              "--warmup", "1", "--json", "--kernel-choice", "default")
    assert code == 0, (err, exc)
    report = json.loads(out)
    assert report["against"] == "pytorch_static_runtime" and report["note"] is None
    rows = {r["kind"]: r for r in report["rows"]}
    # MLP: 3 x (linear + relu), in both graphs (ours runs relu in place)
    assert rows["aten::linear"]["ours_instances"] == rows["aten::linear"]["other_instances"] == 3
    assert rows["aten::relu"]["ours_kinds"] == ["aten::relu_"]
    assert rows["aten::relu"]["other_kinds"] == ["aten::relu"]
    assert rows["aten::relu"]["other_instances"] == 3
    assert report["rows"][-1]["kind"] == "(outside the nodes)"
    total = report["total"]
    assert total["ours_us"] == pytest.approx(sum(r["ours_us"] or 0 for r in report["rows"]))
    assert total["other_us"] == pytest.approx(sum(r["other_us"] or 0 for r in report["rows"]))
    assert total["cost_us"] == pytest.approx(sum(r["cost_us"] for r in report["rows"]))
    for r in report["rows"][:-1]:
        assert r["ours_us_per_instance"] == pytest.approx(r["ours_us"] / r["ours_instances"])


def test_profile_against_cpp_where_it_refuses(tmp_path):
    path = tmp_path / "encoder.pt"
    torch.jit.save(script(MODELS["transformer_encoder"].build()), str(path))
    code, out, err, exc = run("profile", path, "--input", "1x32x128:float32", "--against",
                              "cpp", "--repeats", "1", "--runs", "2", "--warmup", "1")
    assert code == 0, (err, exc)
    text = " ".join(out.split())
    assert "PyTorch's C++ Static Runtime refuses the model" in text
    assert "ours against TorchScript" in text and "measured differently" in text


def test_profile_against_cpp_exported_program(exported):
    code, out, err, exc = run("profile", exported["mlp"], "--against", "cpp", "--repeats", "1",
                              "--runs", "2", "--warmup", "1", "--json")
    assert code == 0, (err, exc)
    report = json.loads(out)
    assert report["against"] == "eager" and "torch.export" in report["note"]
    assert any(r["kind"] == "aten::linear" and r["other_instances"] == 3
               for r in report["rows"])


# --------------------------------------------------------------------------- inspect


def test_inspect_shows_passes_graph_tiers_and_memory(models, tmp_path):
    plot = tmp_path / "arena.png"
    code, out, err, exc = run("inspect", models["mlp"], "--input", "4x64:float32",
                              "--plot-memory", plot, "--kernel-choice", "default")
    assert code == 0, (err, exc)
    assert "forward(x: Tensor)" in out
    assert "inplace_activations" in out and "relu_ ×3" in out
    assert "prepared graph" in out and "graph(%x" in out
    assert "tiers: 3 out variant" in out
    assert "arena 2.0 KiB for 2 tensors" in out
    assert _png_size(plot) == (1210, 715)  # memory/plot.py: 11 × 6.5 in at 110 dpi


def test_inspect_json_records_each_pass(models):
    code, out, err, exc = run("inspect", models["control_flow"], "--json")
    assert code == 0, (err, exc)
    report = json.loads(out)
    names = [p["name"] for p in report["passes"]]
    assert names == [n for n in PASS_ORDER if n in names] and len(names) >= 8
    for before, after in zip(report["passes"], report["passes"][1:]):
        assert after["nodes_before"] == before["nodes_after"]
    for p in report["passes"]:
        if not p["changed"]:
            assert p["nodes_before"] == p["nodes_after"] and not p["added"]
    assert report["passes"][0]["nodes_before"] == report["imported_nodes"]
    assert report["memory_plan"] is None  # no inputs given
    assert "prim::Loop" in report["graph"]


def test_inspect_plot_needs_inputs(models, tmp_path):
    code, _, err, _ = run("inspect", models["mlp"], "--plot-memory", tmp_path / "a.png")
    assert code != 0 and "--input" in err


def test_inspect_exported_program(exported):
    code, out, err, exc = run("inspect", exported["mlp"])
    assert code == 0, (err, exc)
    assert "forward(x: Tensor)" in out
    # measured kernels (the default): each linear takes its relu along
    assert "fuse_linear_activation" in out and "linear_pointwise ×3" in out
    assert "prepared graph" in out and "graph(%x" in out and "linear_pointwise" in out
    assert "tiers: 3 out variant" in out
    assert "inputs 2x64:float32:" in out  # the memory plan, for the recorded inputs
    assert "arena" in out
    code, out, err, exc = run("inspect", exported["bare"], "--json")
    assert code == 0, (err, exc)
    report = json.loads(out)
    assert report["memory_plan"] is None and report["inputs"] is None
    assert report["passes"][0]["nodes_before"] == report["imported_nodes"]


# --------------------------------------------------------------------------- errors


def _one_line_error(code: int, err: str, exc: BaseException | None) -> str:
    assert code == 1
    assert isinstance(exc, SystemExit), exc
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    assert "Traceback" not in err
    return lines[0]


def test_missing_file(tmp_path):
    code, _, err, exc = run("profile", tmp_path / "nope.pt", "--input", "1x64:float32")
    assert "no such file" in _one_line_error(code, err, exc)


def test_file_that_is_not_a_model(models):
    code, _, err, exc = run("inspect", models["text"])
    assert "not a model file" in _one_line_error(code, err, exc)


def test_state_dict_is_not_a_model(models):
    code, _, err, exc = run("bench", models["state_dict"], "--input", "1x64:float32")
    line = _one_line_error(code, err, exc)
    assert "torch.save" in line and "torch.jit.save" in line


def _rewrite_zip(src: Path, dst: Path, change) -> Path:
    """A copy of the zip ``src`` at ``dst``, each member's bytes passed through
    ``change(name, data)`` (None drops the member)."""
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(dst, "w") as zout:
        for name in zin.namelist():
            data = change(name, zin.read(name))
            if data is not None:
                zout.writestr(name, data)
    return dst


@pytest.fixture(scope="module")
def damaged(exported, tmp_path_factory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("damaged")
    data = exported["mlp"].read_bytes()
    truncated = d / "truncated.pt2"
    truncated.write_bytes(data[:len(data) // 2])
    return {
        "truncated": truncated,
        "no_program": _rewrite_zip(exported["mlp"], d / "no_program.pt2",
                                   lambda n, b: None if n.endswith("model.json") else b),
        "bad_json": _rewrite_zip(exported["mlp"], d / "bad_json.pt2",
                                 lambda n, b: b[:len(b) // 2] if n.endswith("model.json")
                                 else b),
    }


@pytest.mark.parametrize("kind, message", [
    ("truncated", "is not a torch.export archive: not a zip archive"),
    ("no_program", "holds no exported program"),
    ("bad_json", "torch.export.load can read (JSONDecodeError"),
])
def test_damaged_exported_program_archive(damaged, kind, message):
    for command in ("bench", "profile", "inspect"):
        code, _, err, exc = run(command, damaged[kind])
        line = _one_line_error(code, err, exc)
        assert message in line and str(damaged[kind]) in line, (command, line)


def test_damaged_archive_error_is_one_line_on_the_real_stderr(damaged):
    """torch.export.load logs a traceback (a warning, through its own stderr handler) before
    it fails; the command holds it back."""
    proc = subprocess.run([sys.executable, "-m", "static_runtime", "inspect",
                           str(damaged["truncated"])], cwd=ROOT, capture_output=True,
                          text=True, check=False)
    assert proc.returncode == 1
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "not a torch.export archive" in lines[0], proc.stderr


def test_inputs_that_do_not_match_the_signature(models):
    code, _, err, exc = run("profile", models["mlp"], "--input", "1x64:float32",
                            "--input", "2:int64")
    line = _one_line_error(code, err, exc)
    assert "forward(x: Tensor)" in line and "too many arguments" in line
    code, _, err, exc = run("profile", models["mlp"], "--input", "1x32:float32")
    line = _one_line_error(code, err, exc)
    assert "forward(x: Tensor)" in line and "1x32:float32" in line
    assert "linear" in line  # the node that failed (linear_pointwise: linear + relu)
    code, _, err, exc = run("profile", models["mlp"])
    assert "forward(x: Tensor)" in _one_line_error(code, err, exc)


def test_bad_input_spec(models):
    code, _, err, exc = run("bench", models["mlp"], "--input", "1x64:floaty")
    assert "unknown dtype 'floaty'" in _one_line_error(code, err, exc)
    code, _, err, exc = run("bench", models["mlp"], "--input", "64")
    assert "SHAPE:DTYPE" in _one_line_error(code, err, exc)


def test_unsupported_operator(models):
    code, _, err, exc = run("inspect", models["unsupported"])
    line = _one_line_error(code, err, exc)
    assert "sr_test_cli::mutate_list" in line
    assert "sr_test_cli::mutate_list(int[](a!) x) -> ()" in line  # the schema
    assert "test_cli.py:" in line  # the source line


def test_debug_shows_the_traceback(tmp_path):
    result = CliRunner().invoke(main, ["--debug", "inspect", str(tmp_path / "nope.pt")])
    assert result.exit_code != 0
    assert not isinstance(result.exception, SystemExit)
    assert "no such file" in str(result.exception)
