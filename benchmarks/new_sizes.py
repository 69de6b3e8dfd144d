"""The first call of a size never seen, against a steady call of that size (issue 18's goal:
≤ 1.5 ×), for ours and its peers, in a process past its start.

Per traffic workload (``benchmarks/traffic_workloads.py``): each peer is warmed on the trace's
first three sizes (five calls each) and what ours builds in the background is let finish;
then for ``--sizes`` further sizes of the trace, none seen before, in the order the trace first
brings them, the peers in turn (an order drawn per size) make five calls of that size:
``first`` is the first call's µs, ``steady`` the median of the last three. Each call is a
request of its own (``Workload.request``: the size's shapes, new values), as a service's
calls are: until session 21 the five calls repeated one request, and the steady ones found
the values the first had read in the caches (the recommender's table rows: ~20 % of its
steady call). ``steady, mixed``: three more calls of the size, each after a call of another
size (one of the warm ones), as a size's calls come in traffic of many sizes — back to back,
the second of two calls finds the first's code, data and tables in the processor's caches,
which a call of a new size never does. Medians over the sizes, and the median of each size's
first ÷ steady (and ÷ mixed). The kernel choice cache is the one the process is given
(``STATIC_RUNTIME_CACHE_DIR``): warm on a machine that ran the workload once; with a fresh
directory a new row bucket is measured on its first call (``traffic.py``'s new-size columns,
run on a fresh cache, show that case).

For ours, where a first call's time goes beyond a steady call's (medians over the sizes, µs):
laying the size out (``prepare``: the shape program evaluated, the regions fitted, the arena
views made), binding the generated function (``bind``), checking the program's shapes after
the call (``finish``), keeping the size's binding for later switches (``keep``) and the rest
("in the call": the operators' own first call of a shape, the per-binding values the function
computes once, cold caches). Each part is timed by a wrapper around the executor's method on
first calls only.

Ours' new sizes are also given to a second runtime of the module (``clone()``) after the
first's calls of them: its first call finds the size laid out and every kernel's per-shape
call made by the first, so what it pays beyond a steady call is the per-runtime work (views
of its own arena, binding the function) and the rest of the first's extra is per module
(``second runtime first``).

    python benchmarks/new_sizes.py [--workloads text,recsys,conv] [--sizes 60] [--peers ...]
"""

from __future__ import annotations

import random
import statistics
import sys
import time
import warnings
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path

import click
import torch
from rich.console import Console
from rich.table import Table

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # (run as a script: the helpers are imported from the root)
    sys.path.insert(0, str(ROOT))

from benchmarks.traffic import make_peers
from benchmarks.traffic_workloads import WORKLOADS
from static_runtime.runtime.codegen.executor import CodegenExecutor
from static_runtime.runtime.hot import wait_for_builds

PEERS = "eager,torchscript,pytorch_static_runtime,static_runtime"
#: the executor's steps of a new size's first call, as ``CodegenExecutor`` names them
PARTS = {"prepare": "prepare", "_bind": "bind", "finish": "finish", "_keep_ready": "keep"}


class _Parts:
    """Times ``PARTS`` of the executor while ``on`` (ns per part of the current call)."""

    def __init__(self):
        self.on = False
        self.ns: dict[str, int] = {}
        self._saved: dict[str, Callable] = {}

    def __enter__(self):
        clock = time.perf_counter_ns
        for attr in PARTS:
            original = self._saved[attr] = getattr(CodegenExecutor, attr)

            def timed(executor, *args, _original=original, _attr=attr, **kwargs):
                if not self.on:
                    return _original(executor, *args, **kwargs)
                start = clock()
                try:
                    return _original(executor, *args, **kwargs)
                finally:
                    self.ns[_attr] = self.ns.get(_attr, 0) + clock() - start

            setattr(CodegenExecutor, attr, timed)
        return self

    def __exit__(self, *exc):
        for attr, original in self._saved.items():
            setattr(CodegenExecutor, attr, original)


def probe(name: str, sizes: int, peers: tuple[str, ...]) -> dict:
    w = WORKLOADS[name]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        peers, _ = make_peers(w, peers, None)
    live = [p for p in peers if p.fn is not None]
    distinct = list(dict.fromkeys(w.trace(20000, 0)))
    warm, fresh = distinct[:3], distinct[3:3 + sizes]
    clock = time.perf_counter_ns
    firsts: dict[str, list[float]] = defaultdict(list)
    steadies: dict[str, list[float]] = defaultdict(list)
    mixeds: dict[str, list[float]] = defaultdict(list)
    parts: dict[str, list[float]] = defaultdict(list)
    seconds: list[float] = []
    rng = random.Random(0)
    ours_module = next((p.module for p in live if p.module is not None), None)
    second = ours_module.runtime().clone() if ours_module is not None else None
    with _Parts() as timing:
        for p in live:
            for size in warm:
                for _ in range(5):
                    p.fn(*w.inputs(size))
                    if p.module is not None:
                        second(*w.inputs(size))
        wait_for_builds()
        for size in fresh:
            x = w.inputs(size)
            later = [w.request(size, i) for i in range(1, 6)]  # (new values, as traffic's)
            order = list(live)
            rng.shuffle(order)
            for p in order:
                ours = p.module is not None
                timing.ns.clear()
                timing.on = ours
                start = clock()
                p.fn(*x)
                first = clock() - start
                timing.on = False
                calls = []
                for y in later[:4]:
                    start = clock()
                    p.fn(*y)
                    calls.append(clock() - start)
                steady = statistics.median(calls[1:])
                mixed = []
                for i, y in enumerate(later[1:4]):
                    p.fn(*w.inputs(warm[i % len(warm)]))  # (another size between)
                    start = clock()
                    p.fn(*y)
                    mixed.append(clock() - start)
                firsts[p.name].append(first / 1e3)
                steadies[p.name].append(steady / 1e3)
                mixeds[p.name].append(statistics.median(mixed) / 1e3)
                if ours:
                    inside = first - sum(timing.ns.values()) - steady
                    for attr, label in PARTS.items():
                        parts[label].append(timing.ns.get(attr, 0) / 1e3)
                    parts["in the call"].append(inside / 1e3)
                    start = clock()
                    second(*later[4])
                    seconds.append((clock() - start) / 1e3)
    out = {"sizes": len(fresh), "peers": {}}
    for p in live:
        f, s, m = firsts[p.name], steadies[p.name], mixeds[p.name]
        out["peers"][p.name] = {
            "first_us": statistics.median(f), "steady_us": statistics.median(s),
            "first_over_steady": statistics.median(a / b for a, b in zip(f, s)),
            "mixed_us": statistics.median(m),
            "first_over_mixed": statistics.median(a / b for a, b in zip(f, m))}
    out["ours_parts_us"] = {k: statistics.median(v) for k, v in parts.items()}
    if seconds:
        out["ours_second_runtime_first_us"] = statistics.median(seconds)
    return out


@click.command()
@click.option("--workloads", default="text,recsys,conv", show_default=True)
@click.option("--sizes", default=60, show_default=True,
              help="new sizes probed per workload (fewer if the trace has fewer)")
@click.option("--peers", default=PEERS, show_default=True,
              help="any of traffic.py's peers; each call of one lands on caches the others "
                   "left (alone, ours reads its best)")
def main(workloads: str, sizes: int, peers: str) -> None:
    torch.set_num_threads(1)
    console = Console(width=150)
    for name in workloads.split(","):
        result = probe(name, sizes, tuple(peers.split(",")))
        table = Table(title=f"{name}: the first call of {result['sizes']} new sizes "
                            f"(medians, µs)")
        for col in ("peer", "first", "steady", "first ÷ steady", "steady, mixed",
                    "first ÷ mixed"):
            table.add_column(col, justify="left" if col == "peer" else "right")
        for peer, r in result["peers"].items():
            table.add_row(peer, f"{r['first_us']:.1f}", f"{r['steady_us']:.1f}",
                          f"{r['first_over_steady']:.2f}", f"{r['mixed_us']:.1f}",
                          f"{r['first_over_mixed']:.2f}")
        console.print(table)
        console.print("  ours beyond a steady call: " + ", ".join(
            f"{k} {v:.1f}" for k, v in result["ours_parts_us"].items()))
        if "ours_second_runtime_first_us" in result:
            console.print(f"  ours, a second runtime's first call of a size the first laid "
                          f"out: {result['ours_second_runtime_first_us']:.1f}")


if __name__ == "__main__":
    main()
