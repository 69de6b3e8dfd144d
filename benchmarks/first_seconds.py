"""The first seconds of a freshly prepared module, called back to back as a busy service
calls it: per-call latency in windows of wall time, against the steady call.

A module prepared a moment ago still has work to do off the request path — shape programs
and the code a hot signature gets are built on a background thread (``runtime/hot.py``) —
and that work shares the GIL with the calls. This measures what a request sees meanwhile.
Each (model, runtime) runs in a fresh Python process (PyTorch and the zoo imported, not
timed), one thread: prepare, then call on the model's inputs for ``--seconds`` of wall time.
The steady call is timed afterwards, once every background build has finished.

Columns, per runtime: the first call; p50 and p99 of the calls in each window of the first
second (``0-250 ms`` ...); the calls made in the first second; and *excess* — the time the
first ``--seconds`` took beyond what as many steady calls take (what the start cost the
requests in all). TorchScript (frozen) optimises during its first calls too (its profiling
executor): it is the peer.

    python benchmarks/first_seconds.py [--models mobilenet_tiny,hf_bert] [--seconds 2]
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

import click
from rich.console import Console
from rich.table import Table

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # (run as a script: the helpers are imported from the root)
    sys.path.insert(0, str(ROOT))

from benchmarks.workers import run_script

_CHILD = r"""
import json, statistics, sys, time, warnings
import torch
torch.set_num_threads(1)
warnings.simplefilter("ignore")
import static_runtime as sr
from static_runtime.runtime.hot import wait_for_builds
from benchmarks.zoo import ZOO
runtime, name, batch, seconds = sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4])
model = ZOO[name]
inputs = model.inputs(batch)
scripted = model.scripted()
if runtime == "ours":
    fn = sr.StaticModule(scripted)
else:
    fn = torch.jit.freeze(scripted)
with torch.inference_mode():
    times, at = [], []
    clock = time.perf_counter
    start = clock()
    while True:
        t = clock()
        if t - start >= seconds:
            break
        fn(*inputs)
        times.append(clock() - t)
        at.append(t - start)
    wait_for_builds()
    steady = []
    for _ in range(max(200, min(2000, len(times) // 4))):
        t = clock()
        fn(*inputs)
        steady.append(clock() - t)
print(json.dumps({"times": times, "at": at, "steady": statistics.median(steady)}))
"""

WINDOWS = ((0.0, 0.25), (0.25, 0.5), (0.5, 1.0))


def _quantile(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


def summarise(run: dict) -> dict:
    """Figures in µs (excess in ms) of one child's run."""
    times, at, steady = run["times"], run["at"], run["steady"]
    out = {"first": times[0] * 1e6, "steady": steady * 1e6,
           "calls_1s": sum(1 for a in at if a < 1.0),
           "excess_ms": (sum(times) - steady * len(times)) * 1e3}
    for lo, hi in WINDOWS:
        window = [t for t, a in zip(times, at) if lo <= a < hi] or [float("nan")]
        out[f"p50 {lo:g}-{hi:g}s"] = statistics.median(window) * 1e6
        out[f"p99 {lo:g}-{hi:g}s"] = _quantile(window, 0.99) * 1e6
    return out


@click.command()
@click.option("--models", default="mobilenet_tiny:1,hf_bert:1,dcn_v2:8", show_default=True,
              help="zoo models, each name:batch")
@click.option("--runtimes", default="ours,torchscript", show_default=True)
@click.option("--seconds", default=2.0, show_default=True, help="wall time called, each run")
@click.option("--repeats", default=3, show_default=True, help="fresh processes per cell "
              "(the run of median excess is shown)")
@click.option("--json-out", type=click.Path(dir_okay=False), default=None)
def main(models: str, runtimes: str, seconds: float, repeats: int, json_out: str | None) -> None:
    table = Table(title=f"a fresh module's first {seconds:g} s, called back to back, one "
                        f"thread (µs; the run of median excess of {repeats})")
    columns = ["first", *(f"{p} {lo:g}-{hi:g}s" for lo, hi in WINDOWS for p in ("p50", "p99")),
               "steady", "calls_1s", "excess_ms"]
    for col in ("model", "runtime", *columns):
        table.add_column(col, justify="right")
    results = []
    for spec in models.split(","):
        name, _, batch = spec.partition(":")
        for runtime in runtimes.split(","):
            runs = sorted((summarise(run_script(_CHILD, runtime, name, int(batch or 1), seconds))
                           for _ in range(repeats)), key=lambda r: r["excess_ms"])
            row = runs[len(runs) // 2]
            results.append({"model": name, "batch": int(batch or 1), "runtime": runtime,
                            **row, "excess_ms_all": [r["excess_ms"] for r in runs]})
            table.add_row(f"{name} b{batch or 1}", runtime,
                          *(f"{row[c]:.0f}" if c != "excess_ms" else f"{row[c]:.1f}"
                            for c in columns))
    Console(width=200).print(table)
    if json_out:
        Path(json_out).write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
