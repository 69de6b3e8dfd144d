"""Full garbage collections under traffic of more sizes than the layout cache holds.

Each new size leaves long-lived objects (its layout, the arena views a runtime binds, the
code bound to them, the kernels' per-shape calls: ~85 tracked objects a size on the
recommender, ~225 on the text encoder since session 18, ``benchmarks/objects_per_size.py``);
once evicted they are freed, but having survived the young collections they count towards
the next *full* collection, which scans every object of the process (~350 k after importing
PyTorch and preparing a model: 130–200 ms, GIL held). Python starts one when the objects
promoted since the last exceed a quarter of the old generation.

Uniformly random sizes (batch 1…512 on ``recsys``, length 8…256 on ``text``) in one process,
one thread, after a warm-up of three sizes: ours as the library leaves the process, ours after
``gc.freeze()`` once warm (what ``static-runtime serve`` does when a replica is built), and
TorchScript (frozen). Mean, p50, p99, the longest call, and the full collections' count and
time. Each runtime in a fresh process.

    python benchmarks/gc_pauses.py [--workloads recsys,text] [--calls 3000]
"""

from __future__ import annotations

import json
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
import gc, json, random, statistics, sys, time, warnings
import torch
torch.set_num_threads(1)
warnings.simplefilter("ignore")
import static_runtime as sr
from static_runtime.runtime.hot import wait_for_builds
from benchmarks.traffic_workloads import MAX_BATCH, MAX_LENGTH, WORKLOADS
name, runtime, calls = sys.argv[1], sys.argv[2], int(sys.argv[3])
w = WORKLOADS[name]
scripted = w.script(w.model())
fn = torch.jit.freeze(scripted) if runtime == "torchscript" else sr.StaticModule(scripted)
low, high = (1, MAX_BATCH) if name == "recsys" else (8, MAX_LENGTH)
rng = random.Random(0)
sizes = [rng.randint(low, high) for _ in range(calls)]
inputs = {s: w.inputs(s) for s in set(sizes) | {low, high, (low + high) // 2}}
with torch.inference_mode():
    for s in (low, high, (low + high) // 2):
        for _ in range(5):
            fn(*inputs[s])
    wait_for_builds()
    if runtime == "ours, gc.freeze()":
        gc.collect()
        gc.freeze()
    full = []
    def watch(phase, info, start=[0.0]):
        if phase == "start":
            start[0] = time.perf_counter()
        elif info["generation"] == 2:
            full.append(time.perf_counter() - start[0])
    gc.callbacks.append(watch)
    times = []
    for s in sizes:
        t = time.perf_counter()
        fn(*inputs[s])
        times.append(time.perf_counter() - t)
times.sort()
print(json.dumps({"mean": statistics.mean(times), "p50": times[len(times) // 2],
                  "p99": times[int(0.99 * len(times))], "max": times[-1],
                  "full_gcs": len(full), "full_gc_s": sum(full)}))
"""

RUNTIMES = ("ours", "ours, gc.freeze()", "torchscript")


@click.command()
@click.option("--workloads", default="recsys,text", show_default=True)
@click.option("--calls", default=3000, show_default=True)
@click.option("--json-out", type=click.Path(dir_okay=False), default=None)
def main(workloads: str, calls: int, json_out: str | None) -> None:
    table = Table(title=f"{calls} calls of uniformly random sizes, one thread (µs; longest "
                        "call and collections in ms)")
    for col in ("workload", "runtime", "mean", "p50", "p99", "longest", "full GCs",
                "their ms", "% of the run"):
        table.add_column(col, justify="right")
    results = []
    for workload in workloads.split(","):
        for runtime in RUNTIMES:
            r = run_script(_CHILD, workload, runtime, calls)
            results.append({"workload": workload, "runtime": runtime, **r})
            run_s = r["mean"] * calls
            table.add_row(workload, runtime, f"{r['mean'] * 1e6:.0f}", f"{r['p50'] * 1e6:.0f}",
                          f"{r['p99'] * 1e6:.0f}", f"{r['max'] * 1e3:.1f}", str(r["full_gcs"]),
                          f"{r['full_gc_s'] * 1e3:.0f}", f"{100 * r['full_gc_s'] / run_s:.1f}")
    Console(width=140).print(table)
    if json_out:
        Path(json_out).write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
