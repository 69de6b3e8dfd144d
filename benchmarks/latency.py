"""Latency, side by side (issue 4): µs per call of eager PyTorch, frozen TorchScript,
``torch.jit.optimize_for_inference``, PyTorch's C++ Static Runtime, ``torch.compile``
(inductor), ONNX Runtime and ours, on the built-in models; how long each takes to get ready
(our ``StaticModule`` construction, ``torch.compile``'s compilation, the ONNX export); and
what our runtime costs per operator beyond the operators themselves.

Each (model, batch) case runs in a fresh process (``torch.compile`` and ONNX Runtime leave
state behind: compiled-code caches, thread pools, a dynamo reset is not enough), single-
threaded by default. Inside it every runner is timed in ``--repeats`` samples of ``--calls``
calls, the runners alternated within each repeat, and the median sample is reported. The
runners themselves are ``static_runtime.compare``'s (``compare/peers.py`` says how each peer is
set up); a peer that cannot run a model is reported with the reason, and one that runs with
reservations (a lossy ONNX export, a graph break) with caveats. Every runner's output is
compared with eager's. ``torch.compile`` compiles cold: each worker gets an empty inductor
cache directory unless ``--warm-inductor-cache``.

    python benchmarks/latency.py                          # all cases, ~6 minutes on 2 cores
    python benchmarks/latency.py --models mlp,dlrm:256 --peers eager,torchscript --repeats 5
    python benchmarks/latency.py --zoo                    # the model zoo (benchmarks/zoo/)
    python benchmarks/latency.py --zoo --quick --models hf_bert,dcn_v2

The model zoo
-------------
``--zoo`` runs every model of ``benchmarks.zoo.ZOO`` (or those named in ``--models``) at both
of its batch sizes, each case in a fresh process as above, against ``ZOO_PEERS``: eager
PyTorch on ``eager()``, and frozen TorchScript, the C++ Static Runtime and ours on the
model's own ``scripted()`` module (traced for the Hugging Face models, which cannot be
scripted); ONNX Runtime on an export of the eager model (or of the scripted one). The number
of calls per sample is chosen per case so that a sample of the slowest runner takes about
``--sample-ms``. Reported: µs per call, ours ÷ C++ SR, ours ÷ the faster of frozen
TorchScript and C++ SR, ours ÷ ONNX Runtime, and their geometric means over all cases (ours ÷
ORT also at batch 1 and at the larger batches, and its worst case). The
kernel-replay overhead figures are not measured for the zoo. ``--quick`` is fewer, shorter
samples (a smoke run). JSON in ``benchmarks/results/zoo_latency.json``.

Overhead per operator
---------------------
The brief's first definition, ``(ours − Σ time_per_node) / nodes`` with the per-node times of
``mod.benchmark_individual_ops``, does not measure what it is after: each ``time_per_node``
is taken around our executor running that one node, so it already holds our per-node
dispatch cost; the difference is only the per-call cost outside the nodes (argument binding,
the inference-mode guard, memory setup), spread over the nodes. It is kept in the JSON
(``node_timer_residual_us_per_node``), with the metrics it comes from.

The figure reported instead: while our runtime makes one call, a ``TorchFunctionMode``
records the kernel calls it makes into torch's Python API (``torch.addmm(..., out=)``,
``torch.ops.aten.linear.out``, ``Tensor.view``, ``Tensor.item``: calls that return a tensor,
write an ``out=`` tensor or read a tensor's data), outermost calls only, with their actual
arguments (the arena tensors, the same inputs). Replaying that list in a bare loop,
``for f, args, kwargs in calls: f(*args, **kwargs)`` under the same inference-mode guard, is
what the call would cost if the runtime were free: the same kernels through the same Python
bindings, in straight-line code (the floor a generated Python executor can approach). So

    overhead per op = (our µs per call − replay µs per call) / kernel calls per call,

both times measured in the same alternating loop as the runners. Everything else our
runtime does counts as overhead, as it should: metadata queries (``dtype``, ``dim``, sizes:
its input checks), list and tuple construction, constants, control flow; so would an
operator run through a one-node TorchScript fallback, which the mode cannot see.

The same is done for eager PyTorch (the overhead of ``nn.Module`` calls and the Python code
around the operators), for reference — except where recording changes what runs:
``nn.TransformerEncoderLayer`` leaves its fused fast path when a torch-function mode is
active (checked by comparing the ATen operators run with and without the recording mode).
Not possible for TorchScript or the C++ runtime, whose calls do not pass through Python.

The figure is sharp where kernels are short (batch 1: a few µs each). Where they take
hundreds of µs (ResNet, batch 64) the difference is within the run-to-run noise of a shared
machine and includes memory effects — the replay drops each result at once, so the
allocator hands back the same, cache-warm block — and can come out negative.
"""

from __future__ import annotations

import json
import math
import os
import platform
import sys
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any

import click

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # `python benchmarks/latency.py`: the zoo is imported from the root
    sys.path.insert(0, str(ROOT))

from benchmarks.workers import run_worker  # (needs ROOT on the path)

PEERS = ("eager", "torchscript", "optimize_for_inference", "pytorch_static_runtime",
         "torch_compile", "onnxruntime", "static_runtime_fused", "static_runtime_measured")
#: ours with fusion_compiler="inductor" (issue 12); a peer only when asked for in --peers
FUSED = "static_runtime_fused"
#: ours with kernel_choice="measure" (issue 19); a peer only when asked for in --peers
MEASURED = "static_runtime_measured"
OURS = "static_runtime"
SHORT = {"eager": "eager", "torchscript": "TorchScript", "optimize_for_inference": "opt4inf",
         "pytorch_static_runtime": "C++ SR", "torch_compile": "compile",
         "onnxruntime": "ORT", "static_runtime": "ours",
         "static_runtime_fused": "ours+fused", "static_runtime_measured": "ours+measured"}
CASES = ("mlp:1", "dlrm:1", "dlrm:256", "multi_head_attention:1", "multi_head_attention:64",
         "transformer_encoder:1", "resnet_small:1", "control_flow:1")
ZOO_PEERS = ("eager", "torchscript", "pytorch_static_runtime", "onnxruntime")
RESULTS = Path(__file__).parent / "results"


# --------------------------------------------------------------------------- in the worker


def _check_inputs(inputs: tuple, seed: int) -> list[tuple]:
    """Input sets of the same shapes (exported models have static shapes) on which a peer's
    fidelity is checked: the floating-point tensors negated (a data-dependent branch on a
    sum takes its other side), and replaced by fresh normal samples. Integer tensors (DLRM's
    indices and offsets) are kept."""
    import torch
    from torch.utils import _pytree as pytree

    generator = torch.Generator().manual_seed(seed)

    def negate(x):
        return -x if isinstance(x, torch.Tensor) and x.is_floating_point() else x

    def fresh(x):
        if isinstance(x, torch.Tensor) and x.is_floating_point():
            return torch.randn(x.shape, generator=generator, dtype=x.dtype)
        return x

    return [pytree.tree_map(negate, inputs), pytree.tree_map(fresh, inputs)]


# Calls that read a tensor's data into Python: kernels (they compute and synchronise),
# though they return no tensor.
DATA_READS = frozenset({"item", "tolist", "__bool__", "__int__", "__float__", "__index__"})


def _record_kernel_calls(fn) -> list[tuple]:
    """The outermost calls into torch's Python API that one ``fn()`` makes and that are
    kernels — return a tensor, write an ``out=`` tensor or read a tensor's data — with their
    arguments: ``[(func, args, kwargs), ...]``. Metadata queries (shape, dtype, dim, device)
    are left out."""
    import torch
    from torch.overrides import TorchFunctionMode
    from torch.utils import _pytree as pytree

    calls: list[tuple] = []

    class Recorder(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            result = func(*args, **kwargs)  # the mode is off inside: nested calls unseen
            if ("out" in kwargs or getattr(func, "__name__", "") in DATA_READS
                    or any(isinstance(x, torch.Tensor) for x in pytree.tree_leaves(result))):
                calls.append((func, args, kwargs))
            return result

    with Recorder():
        fn()
    return calls


def _aten_ops(fn) -> list[str]:
    """The ATen operators one ``fn()`` runs, in order (a ``TorchDispatchMode`` sees them)."""
    from torch.utils._python_dispatch import TorchDispatchMode

    ops: list[str] = []

    class Seen(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            ops.append(str(func))
            return func(*args, **(kwargs or {}))

    with Seen():
        fn()
    return ops


def _recording_changes_path(fn) -> bool:
    """Whether recording ``fn`` changes what it runs: code that checks for torch-function
    overrides (``nn.TransformerEncoderLayer``'s fast path) takes another path under the
    recording mode, and then the replay is not of the same call."""
    return _aten_ops(fn) != _aten_ops(lambda: _record_kernel_calls(fn))


def _replay(calls: list[tuple]):
    import torch

    def run():
        guard = torch._C._InferenceMode(True)
        for f, args, kwargs in calls:
            f(*args, **kwargs)
        del guard

    return run


def _describe_inputs(inputs: Any) -> str:
    import torch
    from torch.utils import _pytree as pytree

    leaves = pytree.tree_leaves(inputs)
    tensors = [x for x in leaves if isinstance(x, torch.Tensor)]
    shapes = ", ".join("x".join(map(str, t.shape)) for t in tensors[:3])
    return shapes + (f", ... ({len(tensors)} tensors)" if len(tensors) > 3 else "")


def worker(model: str, batch: int, peers: tuple[str, ...], repeats: int, calls: int,
           threads: int) -> dict:
    import torch

    from static_runtime import compare
    from static_runtime.models import MODELS

    torch.set_num_threads(threads)
    warnings.simplefilter("ignore")
    spec = MODELS[model]
    module, inputs = spec.build(), spec.example_inputs(batch)
    result: dict[str, Any] = {"model": model, "batch": batch, "threads": threads,
                              "inputs": _describe_inputs(inputs)}
    runners = compare.make_runners(module, inputs, include=tuple(peers) + (OURS,),
                                   check_inputs=_check_inputs(inputs, seed=1))
    agree = compare.outputs_agree(runners) if "eager" in peers else {}
    errors = compare.output_errors(runners) if "eager" in peers else {}
    by_name = {r.name: r for r in runners}

    # Kernel replays: what ours (and eager) would cost with a free runtime.
    replays: list[compare.Runner] = []
    recorded: dict[str, int] = {}
    skipped: dict[str, str] = {}
    for name in (OURS, "eager"):
        r = by_name.get(name)
        if r is None or r.note:
            continue
        for _ in range(5):
            r.fn()
        if _recording_changes_path(r.fn):
            skipped[name] = "recording the calls changes the path the model takes"
            continue
        trace = _record_kernel_calls(r.fn)
        recorded[name] = len(trace)
        replays.append(compare.Runner(f"{name}_kernels", _replay(trace), 0.0))

    timings = compare.time_runners(runners + replays, repeats=repeats, calls=calls)
    result["runners"] = _runner_results(runners, timings, agree, errors)

    overhead: dict[str, Any] = {name: {"skipped": why} for name, why in skipped.items()}
    for name, n in recorded.items():
        us, kernels = timings[name].median_us, timings[f"{name}_kernels"].median_us
        overhead[name] = {"us_per_call": us, "kernels_us_per_call": kernels,
                          "recorded_calls": n,
                          "overhead_us_per_op": (us - kernels) / n if n else None}
    ours = by_name[OURS]
    if not ours.note and OURS in overhead:
        try:
            overhead[OURS].update(_node_timer_residual(ours, inputs, timings[OURS].median_us,
                                                       module, calls))
        except Exception as e:  # noqa: BLE001  (the runtime is being rewritten meanwhile)
            overhead[OURS]["individual_ops_error"] = f"{type(e).__name__}: {e}"[:500]
    result["overhead"] = overhead
    return result


def _runner_cells(rs: dict, names) -> list[str]:
    """Each runner's median µs for a table, ``refused`` where it cannot run the model, ``*``
    after a caveat and ``≠`` where its output differs from eager's."""
    cells = []
    for n in names:
        r = rs.get(n, {})
        if r.get("note"):
            cells.append("[yellow]refused")
            continue
        mark = ("*" if r.get("caveats") else "") + (
            "≠" if r.get("agrees_with_eager") is False else "")
        cells.append(_us(r.get("median_us")) + mark)
    return cells


def _runner_results(runners, timings, agree: dict, errors: dict) -> dict:
    """Each runner's timing and what is known of it, as the JSON records it."""
    return {
        r.name: {
            "median_us": timings[r.name].median_us if r.name in timings else None,
            "min_us": min(timings[r.name].samples_us) if r.name in timings else None,
            "samples_us": timings[r.name].samples_us if r.name in timings else [],
            "setup_seconds": r.setup_seconds,
            "first_call_seconds": r.first_call_seconds,
            "note": r.note, "caveats": r.caveats, "details": r.details,
            "agrees_with_eager": agree.get(r.name),
            "max_abs_error": errors.get(r.name),
        } for r in runners}


def _node_timer_residual(ours, inputs, us_per_call: float, module, calls: int) -> dict:
    """The brief's first definition, (ours − Σ time_per_node) / nodes (see the docstring)."""
    import dataclasses

    import torch

    import static_runtime as sr

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        mod = sr.StaticModule(torch.jit.script(module))
    m = mod.benchmark_individual_ops(inputs, {}, 20, max(calls, 100))
    node_us = sum(m.time_per_node) * 1e3
    metrics = {k: v for k, v in dataclasses.asdict(m).items()
               if k not in ("time_per_node", "out_nodes")}
    return {"sum_time_per_node_us": node_us, "nodes": m.total_nodes_count,
            "node_timer_residual_us_per_node":
                (us_per_call - node_us) / m.total_nodes_count if m.total_nodes_count else None,
            "individual_metrics": metrics}


def _graph_nodes(block) -> int:
    """Nodes of a TorchScript graph or block, those in nested blocks included."""
    return sum(1 + sum(_graph_nodes(b) for b in node.blocks()) for node in block.nodes())


def zoo_worker(model: str, batch: int, peers: tuple[str, ...], repeats: int, calls: int,
               sample_ms: float, threads: int) -> dict:
    """One zoo case: runners on the model's eager module and its own scripted/traced one."""
    import torch

    from benchmarks.zoo import ZOO
    from static_runtime import compare

    torch.set_num_threads(threads)
    warnings.simplefilter("ignore")
    spec = ZOO[model]
    module, scripted, inputs = spec.eager(), spec.scripted(), spec.inputs(batch)
    frozen = torch.jit.freeze(spec.scripted())
    result: dict[str, Any] = {"model": model, "batch": batch, "threads": threads,
                              "family": spec.family, "compile": spec.compile,
                              "description": spec.description,
                              "torchscript_nodes": _graph_nodes(scripted.inlined_graph),
                              "frozen_nodes": _graph_nodes(frozen.graph),
                              "inputs": _describe_inputs(inputs)}
    del frozen
    # Check inputs of the same shapes from other seeds: other branches and trip counts.
    runners = compare.make_runners(module, inputs, include=tuple(peers) + (OURS,),
                                   check_inputs=[spec.inputs(batch, seed=s) for s in (1, 2)],
                                   scripted=scripted)
    agree = compare.outputs_agree(runners) if "eager" in peers else {}
    errors = compare.output_errors(runners) if "eager" in peers else {}
    if not calls:
        calls = _calls_for(runners, sample_ms)
    result["calls"] = calls
    timings = compare.time_runners(runners, repeats=repeats, calls=calls, warmup=5)
    result["runners"] = _runner_results(runners, timings, agree, errors)
    return result


def _calls_for(runners, sample_ms: float) -> int:
    """Calls per sample such that the slowest runner's sample takes about ``sample_ms``
    (from the fastest of three single calls of each), between 3 and 200."""
    slowest = 0.0
    for r in runners:
        if r.note:
            continue
        best = math.inf
        for _ in range(3):
            start = time.perf_counter()
            r.fn()
            best = min(best, time.perf_counter() - start)
        slowest = max(slowest, best)
    return max(3, min(200, round(sample_ms / 1e3 / slowest))) if slowest else 200


# --------------------------------------------------------------------------- in the parent


def run_isolated(case: str, peers: tuple[str, ...], repeats: int, calls: int, threads: int,
                 warm_cache: bool, zoo: bool = False, sample_ms: float = 0.0) -> dict:
    model, batch = case.split(":")
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "result.json"
        env = dict(os.environ)
        if not warm_cache:
            env["TORCHINDUCTOR_CACHE_DIR"] = str(Path(tmp) / "inductor")
        cmd = [sys.executable, __file__, "--worker", case, "--worker-out", str(out),
               "--peers", ",".join(peers), "--repeats", str(repeats), "--calls", str(calls),
               "--threads", str(threads)]
        if zoo:
            cmd += ["--zoo", "--sample-ms", str(sample_ms)]
        return run_worker(cmd, out, {"model": model, "batch": int(batch)}, env)


def _cases(models: str) -> list[str]:
    """``mlp,dlrm:256`` → ``["mlp:1", "dlrm:256"]``; a bare name means its default batches."""
    cases = []
    for item in filter(None, (m.strip() for m in models.split(","))):
        if ":" in item:
            cases.append(item)
        else:
            cases += [c for c in CASES if c.split(":")[0] == item] or [f"{item}:1"]
    return cases


def _us(x: float | None) -> str:
    return "—" if x is None else f"{x:.1f}" if x < 1000 else f"{x:,.0f}"


def _print_tables(rows: list[dict], peers: tuple[str, ...], repeats: int, calls: int,
                  threads: int) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console(width=220)
    names = [p for p in peers] + [OURS]
    table = Table(title=f"µs per call (median of {repeats} × {calls} calls, runners "
                        f"alternated), {threads} thread(s); ours ÷ peer: below 1 = ours "
                        f"faster; * caveat, ≠ output differs from eager (see notes)")
    table.add_column("model")
    table.add_column("batch", justify="right")
    for n in names:
        table.add_column(SHORT[n], justify="right")
    for n in peers:
        table.add_column(f"ours÷{SHORT[n]}", justify="right")
    for row in rows:
        if "error" in row:
            table.add_row(row["model"], str(row["batch"]), f"[red]{row['error'][:80]}")
            continue
        rs = row["runners"]
        cells = _runner_cells(rs, names)
        ours = rs[OURS].get("median_us")
        ratios = []
        for n in peers:
            peer = rs.get(n, {}).get("median_us")
            ratios.append(f"{ours / peer:.2f}" if ours and peer else "—")
        table.add_row(row["model"], str(row["batch"]), *cells, *ratios)
    console.print(table)
    if FUSED in peers:
        console.print(_fused_text(_fused_summary(rows)))

    ready = Table(title="Getting ready (seconds); our overhead beyond the kernels (µs): "
                        "ours − replay of the same kernel calls, per call and per kernel call")
    for col in ("model", "batch", "ours: StaticModule", "ours: 1st call",
                "torch.compile (cold)", "ONNX export", "exporter", "ours", "kernels",
                "overhead/call", "kernel calls", "overhead/op", "eager overhead/op"):
        ready.add_column(col, justify="right")
    for row in rows:
        if "error" in row:
            continue
        rs, ov = row["runners"], row.get("overhead", {})
        ours, tc, ort = rs[OURS], rs.get("torch_compile"), rs.get("onnxruntime")

        def secs(x):
            return "—" if x is None or math.isnan(x) else f"{x:.3f}"

        def per_op(o):
            x = o.get("overhead_us_per_op")
            return "—" if x is None else f"{x:.2f}"

        o, e = ov.get(OURS, {}), ov.get("eager", {})
        extra = (None if "kernels_us_per_call" not in o
                 else o["us_per_call"] - o["kernels_us_per_call"])
        ready.add_row(
            row["model"], str(row["batch"]),
            "refused" if ours["note"] else secs(ours["setup_seconds"]),
            secs(ours["first_call_seconds"]),
            "—" if tc is None else "refused" if tc["note"] else
            secs(tc["details"].get("compile_seconds")),
            "—" if ort is None else "refused" if ort["note"] else
            secs(ort["details"].get("export_seconds")),
            "—" if ort is None or ort["note"] else ort["details"].get("exporter", "?"),
            _us(o.get("us_per_call")), _us(o.get("kernels_us_per_call")), _us(extra),
            str(o.get("recorded_calls", "—")), per_op(o), per_op(e))
    console.print(ready)

    for row in rows:
        for name, o in row.get("overhead", {}).items():
            if "skipped" in o:
                console.print(f"{row['model']} (batch {row['batch']}) / {SHORT[name]} "
                              f"overhead per op not measured: {o['skipped']}")
    _print_notes(rows, console)


def _zoo_ratios(row: dict) -> tuple[float | None, float | None, float | None]:
    """(ours ÷ C++ SR, ours ÷ the faster of frozen TorchScript and C++ SR, ours ÷ ONNX
    Runtime) of one case; None where a side did not run."""
    rs = row.get("runners", {})

    def median(name: str) -> float | None:
        r = rs.get(name) or {}
        return None if r.get("note") else r.get("median_us")

    ours, cpp, ts = median(OURS), median("pytorch_static_runtime"), median("torchscript")
    ort = median("onnxruntime")
    best = min((x for x in (cpp, ts) if x), default=None)
    return (ours / cpp if ours and cpp else None, ours / best if ours and best else None,
            ours / ort if ours and ort else None)


def _ort_summary(rows: list[dict]) -> dict:
    """Geomeans of ours ÷ ONNX Runtime over the cases where both ran: all, batch 1, and the
    larger batches; the worst case."""
    by_batch: dict[str, list[tuple[float, str]]] = {"all": [], "batch_1": [], "batch_gt_1": []}
    for row in rows:
        ratio = None if "error" in row else _zoo_ratios(row)[2]
        if ratio is None:
            continue
        case = f"{row['model']}:{row['batch']}"
        by_batch["all"].append((ratio, case))
        by_batch["batch_1" if int(row["batch"]) == 1 else "batch_gt_1"].append((ratio, case))
    summary: dict = {}
    for key, xs in by_batch.items():
        summary[f"geomean_ours_over_ort_{key}"] = _geomean([x for x, _ in xs])
        summary[f"cases_ort_{key}"] = len(xs)
    worst = max(by_batch["all"], default=None)
    summary["worst_ours_over_ort"] = None if worst is None else {"ratio": worst[0],
                                                                 "case": worst[1]}
    return summary


def _ort_text(summary: dict) -> str:
    def f(key: str) -> str:
        g = summary[f"geomean_ours_over_ort_{key}"]
        return ("—" if g is None else f"{g:.3f}") + f" ({summary[f'cases_ort_{key}']} cases)"

    worst = summary["worst_ours_over_ort"]
    return (f"geomean ours ÷ ORT: {f('all')}; at batch 1 {f('batch_1')}, at larger batches "
            f"{f('batch_gt_1')}" + ("" if worst is None else
                                    f"; worst {worst['ratio']:.2f} ({worst['case']})"))


def _fused_summary(rows: list[dict]) -> dict:
    """With ``static_runtime_fused`` among the peers: geomeans of fused ÷ C++ SR, fused ÷
    ours, and in how many cases fused is at most the best other peer (ORT, torch.compile
    included)."""
    vs_cpp, vs_ours, at_most_best, cases = [], [], 0, 0
    for row in rows:
        rs = row.get("runners", {})
        times = {n: r.get("median_us") for n, r in rs.items()
                 if not r.get("note") and r.get("median_us")}
        fused = times.get(FUSED)
        if not fused:
            continue
        cases += 1
        if times.get("pytorch_static_runtime"):
            vs_cpp.append(fused / times["pytorch_static_runtime"])
        if times.get(OURS):
            vs_ours.append(fused / times[OURS])
        others = [t for n, t in times.items() if n not in (FUSED, OURS)]
        at_most_best += bool(others) and fused <= min(others)
    return {"fused_cases": cases, "geomean_fused_over_cpp_sr": _geomean(vs_cpp),
            "geomean_fused_over_ours": _geomean(vs_ours), "fused_at_most_best_peer": at_most_best}


def _fused_text(summary: dict) -> str:
    def f(x):
        return "—" if x is None else f"{x:.3f}"

    return (f"ours+fused (fusion_compiler='inductor') over {summary['fused_cases']} cases: "
            f"geomean ÷ C++ SR {f(summary['geomean_fused_over_cpp_sr'])}, ÷ ours "
            f"{f(summary['geomean_fused_over_ours'])}; at most the best other peer in "
            f"{summary['fused_at_most_best_peer']}")


def _geomean(xs: list[float]) -> float | None:
    return math.exp(sum(map(math.log, xs)) / len(xs)) if xs else None


def _print_zoo_tables(rows: list[dict], peers: tuple[str, ...], repeats: int,
                      threads: int) -> dict:
    """The zoo table and notes; returns the summary (geomeans) also written to the JSON."""
    from rich.console import Console
    from rich.table import Table

    console = Console(width=220)
    names = list(peers) + [OURS]
    table = Table(title=f"Model zoo: µs per call (median of {repeats} samples, runners "
                        f"alternated), {threads} thread(s); ratios below 1 = ours faster; "
                        f"* caveat, ≠ output differs from eager (see notes)")
    for col in ("model", "family", "how", "nodes", "batch"):
        table.add_column(col, justify="right" if col in ("nodes", "batch") else "left")
    for n in names:
        table.add_column(SHORT[n], justify="right")
    table.add_column("ours÷C++ SR", justify="right")
    table.add_column("ours÷best(TS, C++ SR)", justify="right")
    with_ort = "onnxruntime" in peers
    if with_ort:
        table.add_column("ours÷ORT", justify="right")
    cpp_ratios, best_ratios = [], []
    for row in rows:
        head = [row["model"], row.get("family", ""), row.get("compile", ""),
                str(row.get("frozen_nodes", "")), str(row["batch"])]
        if "error" in row:
            table.add_row(*head, f"[red]{row['error'][:80]}")
            continue
        rs = row["runners"]
        cells = _runner_cells(rs, names)
        vs_cpp, vs_best, vs_ort = _zoo_ratios(row)
        if vs_cpp:
            cpp_ratios.append(vs_cpp)
        if vs_best:
            best_ratios.append(vs_best)
        ratios = (vs_cpp, vs_best, vs_ort) if with_ort else (vs_cpp, vs_best)
        table.add_row(*head, *cells, *("—" if x is None else f"{x:.2f}" for x in ratios))
    console.print(table)
    summary = {"geomean_ours_over_cpp_sr": _geomean(cpp_ratios), "cases_cpp_sr": len(cpp_ratios),
               "geomean_ours_over_best": _geomean(best_ratios), "cases_best": len(best_ratios),
               "cases_ours_slower_than_best": sum(x > 1 for x in best_ratios)}
    if FUSED in peers:
        summary.update(_fused_summary(rows))
        console.print(_fused_text(summary))
    if with_ort:
        summary.update(_ort_summary(rows))
        console.print(_ort_text(summary))
    g, gb = summary["geomean_ours_over_cpp_sr"], summary["geomean_ours_over_best"]
    console.print(f"geomean ours ÷ C++ SR over {len(cpp_ratios)} cases: "
                  + ("—" if g is None else f"{g:.3f}")
                  + "; ours ÷ best(TS, C++ SR): " + ("—" if gb is None else f"{gb:.3f}")
                  + f", ours slower in {summary['cases_ours_slower_than_best']} of "
                  f"{len(best_ratios)} cases")
    _print_notes(rows, console)
    return summary


def _print_notes(rows: list[dict], console) -> None:
    """Refusals, caveats and disagreements, one line each."""
    for row in rows:
        where = f"{row['model']} (batch {row['batch']})"
        if "error" in row:
            console.print(f"[red]{where}: {row['error']}")
            continue
        for name, r in row["runners"].items():
            if r["note"]:
                console.print(f"[yellow]{where} / {SHORT[name]} refused: {r['note']}")
            for c in r["caveats"]:
                console.print(f"{where} / {SHORT[name]}: {c}")
            if r["agrees_with_eager"] is False:
                console.print(f"[red]{where} / {SHORT[name]}: output differs from eager "
                              f"(max |Δ| {r['max_abs_error']})")


def _zoo_cases(models: str | None) -> list[str]:
    """Zoo cases: every named zoo model (all if ``models`` is None) at its batches, or at the
    batch given as ``name:batch``."""
    from benchmarks.zoo import ZOO

    items = list(ZOO) if models is None else [
        m.strip() for m in models.split(",") if m.strip()]
    bad = [m for m in items if m.split(":")[0] not in ZOO]
    if bad:
        raise click.BadParameter(f"unknown zoo model(s) {bad}; choose from {list(ZOO)}",
                                 param_hint="--models")
    return [c for m in items for c in
            ([m] if ":" in m else [f"{m}:{b}" for b in ZOO[m].batches])]


@click.command()
@click.option("--models", default=None,
              help="Comma-separated model[:batch]; a bare name runs its default batches. "
                   f"Default: {','.join(CASES)} (static_runtime.models.MODELS), or with --zoo "
                   "every zoo model.")
@click.option("--zoo", is_flag=True, help="Run the model zoo (benchmarks/zoo/) instead.")
@click.option("--quick", is_flag=True,
              help="A smoke run: 5 samples per runner (and with --zoo 3 ms samples).")
@click.option("--peers", default=None,
              help=f"Comma-separated subset of the peers (ours always runs). Default: "
                   f"{','.join(PEERS)}, or with --zoo {','.join(ZOO_PEERS)}.")
@click.option("--repeats", default=None, type=int,
              help="Timing samples per runner (default 15, with --zoo 11).")
@click.option("--calls", default=None, type=int,
              help="Calls per timing sample (default 100; with --zoo chosen per case from "
                   "--sample-ms).")
@click.option("--sample-ms", default=15.0, show_default=True,
              help="With --zoo: the target length of the slowest runner's timing sample.")
@click.option("--threads", default=1, show_default=True, help="Intra-op threads.")
@click.option("--warm-inductor-cache", is_flag=True,
              help="Let torch.compile use the machine's inductor cache (default: cold).")
@click.option("--json-out", default=None,
              help="Default: benchmarks/results/latency.json, or zoo_latency.json with --zoo.")
@click.option("--worker", default=None, hidden=True)
@click.option("--worker-out", default=None, hidden=True)
def main(models: str | None, zoo: bool, quick: bool, peers: str | None, repeats: int | None,
         calls: int | None, sample_ms: float, threads: int, warm_inductor_cache: bool,
         json_out: str | None, worker: str | None, worker_out: str | None) -> None:
    """Latency of every runtime on the built-in models (or the model zoo), side by side."""
    if peers is None:
        peers = ",".join(ZOO_PEERS if zoo else [p for p in PEERS if p not in (FUSED, MEASURED)])
    peer_list = tuple(p for p in (x.strip() for x in peers.split(",")) if p)
    unknown = [p for p in peer_list if p not in PEERS]
    if unknown:
        raise click.BadParameter(f"unknown peer(s) {unknown}; choose from {list(PEERS)}",
                                 param_hint="--peers")
    if repeats is None:
        repeats = 5 if quick else 11 if zoo else 15
    if quick and zoo:
        sample_ms = min(sample_ms, 3.0)
    if calls is None:
        calls = 0 if zoo else 100  # 0: chosen per case
    if worker:
        model, batch = worker.split(":")
        if zoo:
            result = zoo_worker(model, int(batch), peer_list, repeats, calls, sample_ms,
                                threads)
        else:
            result = globals()["worker"](model, int(batch), peer_list, repeats, calls, threads)
        Path(worker_out).write_text(json.dumps(result, default=str))
        return
    from rich.console import Console

    from static_runtime.models import MODELS

    if zoo:
        cases = _zoo_cases(models)
    else:
        cases = _cases(models or ",".join(CASES))
        bad = [c for c in cases if c.split(":")[0] not in MODELS]
        if bad:
            raise click.BadParameter(f"unknown model(s) {bad}; choose from {sorted(MODELS)}",
                                     param_hint="--models")
    json_out = json_out or str(RESULTS / ("zoo_latency.json" if zoo else "latency.json"))
    console = Console(width=200)
    rows, start = [], time.perf_counter()
    for k, case in enumerate(cases, start=1):
        with console.status(f"[{k}/{len(cases)}] {case} (fresh process) ..."):
            row = run_isolated(case, peer_list, repeats, calls, threads, warm_inductor_cache,
                               zoo=zoo, sample_ms=sample_ms)
        console.print(f"[{k}/{len(cases)}] {case}: "
                      f"{row.get('worker_seconds', float('nan')):.0f} s"
                      + (f" [red]{row['error']}" if "error" in row else ""))
        rows.append(row)
    meta = _meta(repeats, calls, threads, peer_list, warm_inductor_cache,
                 time.perf_counter() - start)
    if zoo:
        meta["sample_ms"] = sample_ms
        summary = _print_zoo_tables(rows, peer_list, repeats, threads)
        document = {"meta": meta, "summary": summary, "cases": rows}
    else:
        _print_tables(rows, peer_list, repeats, calls, threads)
        document = {"meta": meta, "cases": rows}
    Path(json_out).parent.mkdir(parents=True, exist_ok=True)
    Path(json_out).write_text(json.dumps(document, indent=2, default=str))
    console.print(f"JSON: {json_out} ({meta['wall_seconds']:.0f} s)")


def _meta(repeats: int, calls: int, threads: int, peers: tuple[str, ...], warm: bool,
          wall: float) -> dict:
    import torch

    versions = {"torch": torch.__version__, "python": platform.python_version()}
    for name in ("onnxruntime", "onnx", "onnxscript"):
        try:
            versions[name] = __import__(name).__version__
        except ImportError:
            versions[name] = None
    return {"command": " ".join(["python", *sys.argv]),
            "repeats": repeats, "calls": calls, "threads": threads, "peers": list(peers),
            "inductor_cache": "warm" if warm else "cold", "versions": versions,
            "machine": {"cpus": os.cpu_count(), "processor": platform.processor(),
                        "platform": platform.platform()},
            "date": time.strftime("%Y-%m-%d %H:%M:%S"), "wall_seconds": wall}


if __name__ == "__main__":
    main()
