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

from benchmarks.latency_cases import (  # (needs ROOT on the path)
    CASES,
    FUSED,
    OURS,
    PEERS,
    RESULTS,
    UNTUNED,
    ZOO_PEERS,
    cases_of,
    zoo_cases,
)
from benchmarks.latency_report import print_tables, print_zoo_tables
from benchmarks.workers import run_worker

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
        peers = ",".join(ZOO_PEERS if zoo else [p for p in PEERS
                                                if p not in (FUSED, UNTUNED)])
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
        cases = zoo_cases(models)
    else:
        cases = cases_of(models or ",".join(CASES))
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
        summary = print_zoo_tables(rows, peer_list, repeats, threads)
        document = {"meta": meta, "summary": summary, "cases": rows}
    else:
        print_tables(rows, peer_list, repeats, calls, threads)
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
