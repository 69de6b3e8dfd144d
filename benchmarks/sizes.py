"""A traffic workload's model at fixed sizes, and cycling through them: µs per call of ours
beside frozen TorchScript and PyTorch's C++ Static Runtime, one thread, one process.

Where ``traffic.py`` replays a trace, this isolates the steady state: each peer is warmed on
every size (and what ours builds in the background let finish), then timed at each size
alone (the minimum over ``--repeats`` samples of ``--calls`` calls) and cycling through all
of them, one call per size in turn. A peer slower at every fixed size than another cannot
beat it on traffic however cheaply it switches sizes.

    python benchmarks/sizes.py --workload recsys --sizes 1,4,12,40,100,300
    python benchmarks/sizes.py --workload text --sizes 8,20,40,100,250
"""

from __future__ import annotations

import sys
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click
import torch

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # `python benchmarks/sizes.py`: the workloads import from the root
    sys.path.insert(0, str(ROOT))

import static_runtime as sr
from benchmarks.traffic_workloads import WORKLOADS
from static_runtime.runtime.hot import wait_for_builds


def _best(fn: Callable[[], Any], calls: int, repeats: int, per: int = 1) -> float:
    """The fastest of ``repeats`` samples of ``calls`` calls of ``fn``, µs per call (``fn``
    making ``per`` calls of the model)."""
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter_ns()
        for _ in range(calls):
            fn()
        best = min(best, (time.perf_counter_ns() - start) / calls / per / 1e3)
    return best


@click.command()
@click.option("--workload", type=click.Choice(sorted(WORKLOADS)), default="recsys",
              show_default=True)
@click.option("--sizes", default="1,4,12,40,100,300", show_default=True,
              help="Comma-separated sizes of the workload (batch sizes, lengths; for conv "
                   "BATCHxSIDE).")
@click.option("--calls", default=300, show_default=True, help="Calls per timing sample.")
@click.option("--repeats", default=5, show_default=True, help="Timing samples (the fastest "
              "is reported).")
def main(workload: str, sizes: str, calls: int, repeats: int) -> None:
    from rich.console import Console
    from rich.table import Table

    torch.set_num_threads(1)
    w = WORKLOADS[workload]
    parsed = [tuple(int(v) for v in s.split("x")) if "x" in s else int(s)
              for s in sizes.split(",") if s]
    model = w.model().eval()
    scripted = w.script(model)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        frozen = torch.jit.freeze(scripted)
    cpp = torch._C._jit_to_static_module(scripted._c)
    ours = sr.StaticModule(scripted).runtime()
    peers: dict[str, Callable[..., Any]] = {
        "TorchScript": lambda *x: frozen(*x), "C++ SR": lambda *x: cpp(*x), "ours": ours}
    inputs = [w.inputs(s) for s in parsed]
    table = Table(title=f"{workload}: {w.description} — µs per call (min of {repeats} × "
                        f"{calls} calls), 1 thread")
    table.add_column("size")
    for name in peers:
        table.add_column(name, justify="right")
    table.add_column("ours ÷ best", justify="right")
    with torch.inference_mode():
        for _ in range(2):  # the second pass runs what the first had built in the background
            for x in inputs:
                for f in peers.values():
                    for _ in range(20):
                        f(*x)
            wait_for_builds()
        rows = [(str(s), {name: _best(lambda f=f, x=x: f(*x), calls, repeats)
                          for name, f in peers.items()}) for s, x in zip(parsed, inputs)]

        def cycle(f):
            def run():
                for x in inputs:
                    f(*x)
            return run

        rows.append(("cycling", {name: _best(cycle(f), max(1, calls // len(inputs)), repeats,
                                             per=len(inputs))
                                 for name, f in peers.items()}))
    for label, times in rows:
        best = min(times["TorchScript"], times["C++ SR"])
        table.add_row(label, *(f"{v:,.1f}" for v in times.values()), f"{times['ours'] / best:.2f}")
    Console(width=120).print(table)


if __name__ == "__main__":
    main()
