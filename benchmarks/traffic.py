"""Traffic of every size (issue 18): µs per call when each request has its own shape, as users'
traffic does — a text encoder over many sequence lengths, a recommender over the batch sizes a
dynamic batcher makes, a conv net over a few image sizes and batches.

Workloads (models from fixed seeds, nothing downloaded; traces from fixed seeds):

* ``text``: ``BertModel`` (2 layers, hidden 128, 2 heads, as the zoo's ``hf_bert`` but with
  256 positions), traced on ``(input_ids, attention_mask)`` at batch 1; each request one
  sentence, its length drawn from a log-normal (median 40 tokens, σ 0.75) clipped to 8…256.
* ``recsys``: the zoo's ``dcn_v2`` (8 multi-hot ``EmbeddingBag`` tables, DCN-v2 cross layers),
  scripted; batch sizes ``1 + Poisson(λ)`` with λ log-normal (median 12, σ 1.1), clipped to
  512: what a dynamic batcher hands the model when the request rate wanders.
* ``conv``: the zoo's ``resnet_tiny``, scripted; images of 32, 48, 64 or 96 pixels square at
  batch 1, 2 or 4 (12 signatures, small ones commoner).

Peers, each called with the request's own tensors: ``eager`` (the reference), frozen
TorchScript (``torchscript``), PyTorch's C++ Static Runtime (``pytorch_static_runtime``), ONNX
Runtime on an export with dynamic axes (``onnxruntime``; set up as ``static_runtime.compare``
does: one intra-op thread, all graph optimisations), and ours: from the TorchScript module
(``static_runtime``, default options, or ``--plan-cache-size``), from a ``torch.export``
program with a ``Dim`` on each varying axis (``static_runtime_export``) and from TorchScript
with ``plan_cache_size=8``, the default before issue 18 (``static_runtime_cache8``); on
request (not by default), ours laying a size out on its first call as before session 11
(``static_runtime_layout_first``: no allocating first call, even with a full layout cache)
and ours with the defaults before issue 19 (``static_runtime_untuned``: ATen's kernels by
fixed rules, activations in eager's layout). A peer that
cannot be built is reported with the reason; one whose output differs from eager's on the
check sizes (the smallest, a middle and the largest of the trace) is timed and flagged.

Protocol, one process, one thread:

1. *New sizes.* Each peer is warmed on the trace's first three sizes (five calls each) and
   what ours builds in the background meanwhile is let finish; then for up to eight other
   sizes of the trace, none seen before, in the order the trace first brings them, the peers
   in turn (in an order drawn per size) make six calls of that size. ``first`` and
   ``second`` are the first two calls' ms, ``steady`` the median of the last three;
   ``extra`` is what the first three calls cost beyond three steady ones. Medians over the
   sizes are reported. (Until issue 18's shape programs the probed sizes were sorted
   ascending: each was the largest yet.)
2. *Replay.* The trace (``--requests`` requests) is cut into chunks of ``--chunk``; each chunk
   is run by every peer in turn, in an order drawn per chunk (what one peer's calls leave in
   the caches, or to the garbage collector, lands on the next: until session 11 the order
   only rotated, so each peer always followed the same one), timing each call with
   ``perf_counter_ns``. The whole trace is replayed ``--repeats`` times after one untimed
   pass over the first chunk and what ours builds in the background for it. Mean, p50 and
   p99 per call are taken per replay; the median over replays is reported. ``÷ best`` is ours' (or any peer's) mean over the faster of frozen
   TorchScript and the C++ runtime. ``p99 ÷size`` is the p99 of each call's time over the
   median of its size's calls (``size_ratios``): p99/p50 of a mixed trace is mostly the size
   mix, this is the tail beyond it. Python's garbage collector stays on, as in a server.

For ours the JSON also has: distinct signatures in the trace, the layout cache's hits and
misses over the replays, how many times a signature was specialised
(``Specializer.specialize``) and code generated and compiled (``codegen.generate``) and the
seconds each took (both wrapped by a counting probe, ``CodegenProbe``; what they return is
unchanged), and the memory plan of the largest size (arena bytes against the lower bound).

    python benchmarks/traffic.py                        # all workloads, ~4 minutes on 2 cores
    python benchmarks/traffic.py --quick --workloads text
    python benchmarks/traffic.py --workloads recsys --peers torchscript,static_runtime

JSON in ``benchmarks/results/traffic.json``.
"""

from __future__ import annotations

import dataclasses
import json
import platform
import random
import statistics
import sys
import tempfile
import threading
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import click
import torch

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # `python benchmarks/traffic.py`: the zoo is imported from the root
    sys.path.insert(0, str(ROOT))

import static_runtime as sr
from benchmarks.traffic_report import print_workload
from benchmarks.traffic_stats import percentile, size_ratios, summary
from benchmarks.traffic_workloads import WORKLOADS, Workload
from static_runtime.compare.agreement import _agree, _max_abs_error
from static_runtime.compare.onnx_peer import _ort_caller
from static_runtime.compare.peers import UNTUNED
from static_runtime.compare.runner import _reason
from static_runtime.runtime.hot import wait_for_builds

PEERS = ("eager", "torchscript", "pytorch_static_runtime", "onnxruntime", "static_runtime",
         "static_runtime_export", "static_runtime_cache8")
OURS = ("static_runtime", "static_runtime_export", "static_runtime_cache8",
        "static_runtime_layout_first", "static_runtime_untuned")
RESULTS = Path(__file__).parent / "results"


# --------------------------------------------------------------------------- peers


@dataclass
class Peer:
    """One way of running the workload: ``fn(*inputs)``. ``note`` says why it cannot run;
    ``module`` is our ``StaticModule`` for ours."""

    name: str
    fn: Callable[..., Any] | None
    setup_seconds: float = float("nan")
    note: str = ""
    module: Any = None
    details: dict[str, Any] = field(default_factory=dict)


def _inference(fn: Callable[..., Any]) -> Callable[..., Any]:
    def run(*xs):
        with torch.inference_mode():
            return fn(*xs)

    return run


def _make_onnxruntime(w: Workload, model: torch.nn.Module, details: dict) -> Callable[..., Any]:
    """ONNX Runtime on an export with dynamic axes: the ``torch.export``-based exporter with
    the workload's ``Dim``s first, the TorchScript-based one with ``dynamic_axes`` if that
    fails; the export must match eager at two other sizes."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = torch.get_num_threads()
    options.inter_op_num_threads = 1
    options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    example = w.inputs(w.example)
    expected = _inference(model)(*example)
    refusals = []
    with tempfile.TemporaryDirectory() as tmp:
        for exporter in ("dynamo", "torchscript"):
            path = str(Path(tmp) / f"{exporter}.onnx")
            try:
                with warnings.catch_warnings(), torch.no_grad():
                    warnings.simplefilter("ignore")
                    if exporter == "dynamo":
                        torch.onnx.export(model, example, path, dynamo=True,
                                          dynamic_shapes=w.dynamic_shapes(),
                                          external_data=False, verbose=False)
                    else:
                        torch.onnx.export(model, example, path, dynamo=False,
                                          input_names=list(w.axes), dynamic_axes=w.axes)
                session = ort.InferenceSession(path, options,
                                               providers=["CPUExecutionProvider"])
                call = _ort_caller(session, example, expected)
                for size in _check_sizes(w)[::2]:
                    x = w.inputs(size)
                    if not _agree(call(x), _inference(model)(*x)):
                        raise RuntimeError(f"differs from eager at size {size}")
            except Exception as e:  # noqa: BLE001  (the next exporter may do better)
                refusals.append(f"{exporter}: {_reason(e)}")
                continue
            details["exporter"] = exporter
            if refusals:
                details["refusals"] = refusals
            return lambda *xs: call(xs)
    raise RuntimeError("; ".join(refusals))


def make_peers(w: Workload, include: tuple[str, ...], plan_cache_size: int | None
               ) -> tuple[list[Peer], torch.nn.Module]:
    """The peers named in ``include`` for workload ``w``, and the eager model."""
    model = w.model().eval()
    scripted = w.script(model)
    options = sr.StaticModuleOptions() if plan_cache_size is None else \
        sr.StaticModuleOptions(plan_cache_size=plan_cache_size)

    def ours(source: Any, opts: sr.StaticModuleOptions):
        def make(details: dict):
            mod = sr.StaticModule(source, options=opts)
            details["module"] = mod
            details["plan_cache_size"] = opts.plan_cache_size
            return mod.runtime()

        return make

    def exported(details: dict):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            ep = torch.export.export(model, w.inputs(w.example),
                                     dynamic_shapes=w.dynamic_shapes())
        return ours(ep, options)(details)

    def layout_first(details: dict):
        # Ours as before session 11: a size's first call lays it out, rather than running
        # its shape program's allocating code (the executor's switch, set directly: it is
        # not an option users need).
        runtime = ours(scripted, options)(details)
        runtime._interp._programmed = False
        return runtime

    def frozen(details: dict):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return _inference(torch.jit.freeze(scripted))

    def cpp(details: dict):
        sm = torch._C._jit_to_static_module(scripted._c)
        return lambda *xs: sm(*xs)

    factories: dict[str, Callable[[dict], Callable[..., Any]]] = {
        "eager": lambda d: _inference(model),
        "torchscript": frozen,
        "pytorch_static_runtime": cpp,
        "onnxruntime": lambda d: _make_onnxruntime(w, model, d),
        "static_runtime": ours(scripted, options),
        "static_runtime_export": exported,
        "static_runtime_cache8": ours(scripted, sr.StaticModuleOptions(plan_cache_size=8)),
        "static_runtime_layout_first": layout_first,
        "static_runtime_untuned": ours(scripted, dataclasses.replace(
            options, kernel_choice=UNTUNED.kernel_choice, channels_last=UNTUNED.channels_last)),
    }
    peers = []
    for name in include:
        details: dict[str, Any] = {}
        start = time.perf_counter()
        try:
            fn = factories[name](details)
        except Exception as e:  # noqa: BLE001  (a peer that cannot run is reported)
            peers.append(Peer(name, None, note=_reason(e), details=details))
            continue
        peers.append(Peer(name, fn, time.perf_counter() - start,
                          module=details.pop("module", None), details=details))
    return peers, model


# --------------------------------------------------------------------------- probes


class CodegenProbe:
    """Counts, per execution plan, the calls of ``codegen.generate`` (Python source made and
    compiled) and of ``Specializer.specialize`` (the signature's facts derived by running the
    graph's operators on meta tensors), and their seconds, by wrapping both for the
    duration; what they return is unchanged."""

    def __init__(self):
        self.calls: dict[tuple[str, int], int] = {}
        self.seconds: dict[tuple[str, int], float] = {}

    def _counted(self, what: str, original: Callable[..., Any],
                 plan_of: Callable[[Any], Any]) -> Callable[..., Any]:
        def counted(first, *args, **kwargs):
            start = time.perf_counter()
            try:
                return original(first, *args, **kwargs)
            finally:
                key = (what, id(plan_of(first)))
                self.calls[key] = self.calls.get(key, 0) + 1
                self.seconds[key] = self.seconds.get(key, 0.0) + time.perf_counter() - start
                if threading.current_thread() is threading.main_thread():  # (a request's)
                    key = (f"{what}_on_request", key[1])
                    self.calls[key] = self.calls.get(key, 0) + 1

        return counted

    def __enter__(self):
        from static_runtime.runtime import specialize
        from static_runtime.runtime.codegen import function as codegen

        self._generate = codegen.generate
        self._specialize = specialize.Specializer.specialize
        codegen.generate = self._counted("generate", self._generate, lambda plan: plan)
        specialize.Specializer.specialize = self._counted(
            "specialize", self._specialize, lambda specializer: specializer.plan)
        return self

    def __exit__(self, *exc):
        from static_runtime.runtime import specialize
        from static_runtime.runtime.codegen import function as codegen

        codegen.generate = self._generate
        specialize.Specializer.specialize = self._specialize
        return False

    def of(self, mod: Any) -> dict[str, float]:
        """Calls and seconds so far for ``mod``: ``generate``, ``generate_s``, ``specialize``,
        ``specialize_s``."""
        out: dict[str, float] = {}
        for what in ("generate", "specialize"):
            key = (what, id(mod.plan))
            out[what] = self.calls.get(key, 0)
            out[f"{what}_s"] = self.seconds.get(key, 0.0)
            out[f"{what}_on_request"] = self.calls.get((f"{what}_on_request", id(mod.plan)), 0)
        return out


def _check_sizes(w: Workload) -> list:
    """The smallest, a middle and the largest size of the workload's trace."""
    sizes = sorted(set(w.trace(w.requests, 0)))
    return [sizes[0], sizes[len(sizes) // 2], sizes[-1]]


def check_outputs(w: Workload, peers: list[Peer], model: torch.nn.Module) -> None:
    """Each live peer's outputs against eager's on the check sizes: ``details["agrees"]``,
    and the largest |Δ| or the error where it does not."""
    ref = _inference(model)
    for p in peers:
        if p.fn is None or p.name == "eager":
            continue
        problems = []
        for size in _check_sizes(w):
            x = w.inputs(size)
            try:
                got = p.fn(*x)
                want = ref(*x)
                if not _agree(got, want):
                    problems.append(f"size {size}: max |Δ| {_max_abs_error(got, want)}")
            except Exception as e:  # noqa: BLE001  (reported, not fatal)
                problems.append(f"size {size}: {_reason(e)}")
        p.details["agrees"] = not problems
        if problems:
            p.details["disagreements"] = problems


def _call_ms(fn: Callable[..., Any], x: tuple) -> float:
    start = time.perf_counter_ns()
    fn(*x)
    return (time.perf_counter_ns() - start) / 1e6


def new_size_costs(w: Workload, peers: list[Peer], trace: list, calls: int = 6
                   ) -> dict[str, dict[str, float]]:
    """Per peer, medians over up to eight never-seen sizes: the first and second call's ms,
    the steady ms (median of the last three of ``calls``), first ÷ steady, and ``extra``: the
    first three calls beyond three steady ones. Peers are warmed on the trace's first three
    sizes, and what ours builds in the background after them is finished; the sizes probed
    come in the order the trace first brings them (some larger than any seen, most not)."""
    distinct = list(dict.fromkeys(trace))
    warm, fresh = distinct[:3], distinct[3:]
    step = max(1, len(fresh) // 8)
    probe = fresh[::step][:8]  # in the order the trace first brings them
    live = [p for p in peers if p.fn is not None]
    for p in live:
        for size in warm:
            for _ in range(5):
                p.fn(*w.inputs(size))
    wait_for_builds()  # a server that has served a few sizes for a moment
    rows: dict[str, list[list[float]]] = {p.name: [] for p in live}
    for k, size in enumerate(probe):
        x = w.inputs(size)
        for p in _order(live, k):
            rows[p.name].append([_call_ms(p.fn, x) for _ in range(calls)])
    out = {}
    for name, runs in rows.items():
        steady = [statistics.median(r[-3:]) for r in runs]
        out[name] = {
            "sizes": len(runs),
            "first_ms": statistics.median(r[0] for r in runs),
            "second_ms": statistics.median(r[1] for r in runs),
            "steady_ms": statistics.median(steady),
            "first_over_steady": statistics.median(r[0] / s for r, s in zip(runs, steady)),
            "extra_ms": statistics.median(sum(r[:3]) - 3 * s for r, s in zip(runs, steady)),
        }
    return out


def _order(peers: list[Peer], k: int) -> list[Peer]:
    """The peers' order for the ``k``-th chunk (or probed size): a permutation drawn from a
    seed made of ``k``, so that no peer always follows the same one (what a peer's calls
    leave in the caches, or for the garbage collector, lands on whoever comes next: ONNX
    Runtime's 3 ms calls on the recommender made the peer after it look 1.1x slower)."""
    order = list(peers)
    random.Random(k).shuffle(order)
    return order


def replay(w: Workload, peers: list[Peer], trace: list, repeats: int, chunk: int
           ) -> dict[str, list[list[float]]]:
    """Per live peer, per replay, the µs of each call of the trace (see the module
    docstring for the order)."""
    live = [p for p in peers if p.fn is not None]
    chunks = [trace[k:k + chunk] for k in range(0, len(trace), chunk)]
    inputs = [[w.inputs(size) for size in c] for c in chunks]
    for p in live:  # one untimed pass over the first chunk
        for x in inputs[0]:
            p.fn(*x)
    # What ours builds in the background for what it has seen so far (shape programs, code
    # for hot sizes) finishes before the clock starts: the replay is a service past its
    # start (later builds, for sizes that turn hot during the replay, are timed with it).
    wait_for_builds()
    clock = time.perf_counter_ns
    samples: dict[str, list[list[float]]] = {p.name: [] for p in live}
    for _ in range(repeats):
        for s in samples.values():
            s.append([])
        for k, xs in enumerate(inputs):
            for p in _order(live, k):
                fn, out = p.fn, samples[p.name][-1]
                for x in xs:
                    start = clock()
                    fn(*x)
                    out.append((clock() - start) / 1e3)
    return samples


# --------------------------------------------------------------------------- one workload


def run_workload(w: Workload, include: tuple[str, ...], requests: int, repeats: int,
                 chunk: int, plan_cache_size: int | None, log: Callable[[str], None]) -> dict:
    trace = w.trace(requests, 0)
    distinct = sorted(set(trace))
    log(f"[bold]{w.name}[/]: {w.description}; {len(trace)} requests, {len(distinct)} distinct "
        f"sizes ({distinct[0]} … {distinct[-1]})")
    with CodegenProbe() as probe:
        peers, model = make_peers(w, include, plan_cache_size)
        for p in peers:
            if p.note:
                log(f"  {p.name} cannot run: {p.note}")
        check_outputs(w, peers, model)
        log("  new sizes …")
        fresh = new_size_costs(w, peers, trace)
        before = {p.name: (p.module.layouts.hits, p.module.layouts.misses, probe.of(p.module))
                  for p in peers if p.module is not None}
        log(f"  replay × {repeats} …")
        samples = replay(w, peers, trace, repeats, chunk)
        result: dict[str, Any] = {"description": w.description, "requests": len(trace),
                                  "distinct_sizes": len(distinct),
                                  "smallest": distinct[0], "largest": distinct[-1],
                                  "peers": {}}
        for p in peers:
            entry: dict[str, Any] = {"setup_seconds": p.setup_seconds, "note": p.note,
                                     **p.details}
            if p.fn is not None:
                per = [summary(s) for s in samples[p.name]]
                for key in ("mean", "p50", "p99"):
                    entry[f"{key}_us"] = statistics.median(s[key] for s in per)
                entry["p99_of_size_ratio"] = statistics.median(
                    percentile(r, 99) for r in size_ratios(trace, samples[p.name]))
                entry["new_size"] = fresh[p.name]
            if p.module is not None:
                hits0, misses0, counts0 = before[p.name]
                counts = probe.of(p.module)
                entry["ours"] = _ours_figures(w, p, distinct[-1], hits0, misses0, repeats)
                entry["ours"].update({f"{k}_replays": v - counts0[k] for k, v in counts.items()})
                entry["ours"].update({f"{k}_total": v for k, v in counts.items()})
            result["peers"][p.name] = entry
    best = [result["peers"][n]["mean_us"] for n in ("torchscript", "pytorch_static_runtime")
            if "mean_us" in result["peers"].get(n, {})]
    if best:
        for entry in result["peers"].values():
            if "mean_us" in entry:
                entry["over_best"] = entry["mean_us"] / min(best)
    return result


def _ours_figures(w: Workload, p: Peer, largest: Any, hits0: int, misses0: int,
                  repeats: int) -> dict:
    """The layout cache's hits and misses over the replays (and their untimed first chunk),
    and the memory plan after two calls of the largest size (arena against lower bound)."""
    mod = p.module
    figures = {"layout_hits": mod.layouts.hits - hits0,
               "layout_misses": mod.layouts.misses - misses0, "replays": repeats}
    x = w.inputs(largest)
    p.fn(*x)
    p.fn(*x)
    try:
        plan = mod.memory_plan()
        figures["arena_bytes"] = plan.arena_bytes
        figures["lower_bound_bytes"] = plan.lower_bound_bytes
    except RuntimeError as e:
        figures["memory_plan"] = str(e)
    return figures


@click.command()
@click.option("--workloads", default=",".join(WORKLOADS), show_default=True)
@click.option("--peers", default=",".join(PEERS), show_default=True,
              help="Comma-separated; eager is always included (the reference).")
@click.option("--requests", default=None, type=int,
              help="Requests per trace (default per workload: text 2000, recsys 2000, "
                   "conv 600).")
@click.option("--repeats", default=3, show_default=True, help="Replays of the trace.")
@click.option("--chunk", default=100, show_default=True,
              help="Requests each peer runs before the next peer's turn.")
@click.option("--plan-cache-size", default=None, type=int,
              help="plan_cache_size of static_runtime and static_runtime_export "
                   "(default: the option's default).")
@click.option("--quick", is_flag=True, help="Smoke run: 150 requests, one replay.")
@click.option("--json-out", default=str(RESULTS / "traffic.json"), show_default=True)
def main(workloads: str, peers: str, requests: int | None, repeats: int, chunk: int,
         plan_cache_size: int | None, quick: bool, json_out: str) -> None:
    """Replay traces of requests of every size through each peer; see the module docstring."""
    from rich.console import Console

    console = Console(width=150)
    names = [n for n in workloads.split(",") if n]
    bad = [n for n in names if n not in WORKLOADS]
    if bad:
        raise click.BadParameter(f"unknown workload(s) {bad}; choose from {list(WORKLOADS)}")
    include = tuple(dict.fromkeys(["eager", *[p for p in peers.split(",") if p]]))
    bad = [p for p in include if p not in (*PEERS, *OURS)]
    if bad:
        raise click.BadParameter(f"unknown peer(s) {bad}; choose from {[*PEERS, *OURS[-2:]]}")
    if quick:
        requests, repeats = requests or 150, 1
    torch.set_num_threads(1)
    import os

    load = os.getloadavg()
    console.print(f"torch {torch.__version__}, 1 thread, {platform.processor() or 'cpu'}, "
                  f"load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")
    results: dict[str, Any] = {"torch": torch.__version__, "load_average": load,
                               "repeats": repeats, "chunk": chunk, "workloads": {}}
    for name in names:
        w = WORKLOADS[name]
        start = time.perf_counter()
        result = run_workload(w, include, requests or w.requests, repeats, chunk,
                              plan_cache_size, console.print)
        result["seconds"] = time.perf_counter() - start
        results["workloads"][name] = result
        print_workload(console, name, result)
    results["load_average_after"] = os.getloadavg()
    Path(json_out).parent.mkdir(parents=True, exist_ok=True)
    Path(json_out).write_text(json.dumps(results, indent=1, default=str))
    console.print(f"JSON: {json_out}")


if __name__ == "__main__":
    main()
