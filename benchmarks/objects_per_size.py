"""Tracked objects a new size leaves behind (what Python's collector promotes, and counts
towards its next full collection: ``benchmarks/gc_pauses.py``).

Per traffic workload: a module warmed on three sizes (its builds finished), five new sizes
called twice each, then, with the collector off, ``--sizes`` more new sizes called twice
each; the objects the collector tracks after two full collections that were not there
before, per size, by type.

    python benchmarks/objects_per_size.py [--workloads text,recsys] [--sizes 20]
"""

from __future__ import annotations

import collections
import gc
import sys
import warnings
from pathlib import Path

import click
import torch
from rich.console import Console
from rich.table import Table

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # (run as a script: the helpers are imported from the root)
    sys.path.insert(0, str(ROOT))

import static_runtime as sr
from benchmarks.traffic_workloads import WORKLOADS
from static_runtime.runtime.hot import wait_for_builds


def objects_per_size(name: str, sizes: int) -> tuple[float, collections.Counter]:
    """(objects a size, the types' counts over all ``sizes``) for workload ``name``."""
    w = WORKLOADS[name]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        rt = sr.StaticModule(w.script(w.model().eval())).runtime()
    seen = list(dict.fromkeys(w.trace(4000, 0)))
    for s in seen[:3]:
        for _ in range(5):
            rt(*w.inputs(s))
    wait_for_builds()
    fresh = [w.inputs(s) for s in seen[3:8 + sizes]]
    for x in fresh[:5]:
        rt(*x)
        rt(*x)
    gc.collect()
    gc.collect()
    before = {id(o) for o in gc.get_objects()}
    gc.disable()
    try:
        for x in fresh[5:]:
            rt(*x)
            rt(*x)
    finally:
        gc.enable()
    gc.collect()
    gc.collect()  # (a tuple is let go once what it holds is: a second pass)
    new = [o for o in gc.get_objects() if id(o) not in before]
    return len(new) / sizes, collections.Counter(type(o).__name__ for o in new)


@click.command()
@click.option("--workloads", default="text,recsys", show_default=True)
@click.option("--sizes", default=20, show_default=True)
def main(workloads: str, sizes: int) -> None:
    torch.set_num_threads(1)
    table = Table(title="tracked objects a new size leaves (after two full collections)")
    table.add_column("workload")
    table.add_column("a size", justify="right")
    table.add_column("most common types (a size)")
    for name in workloads.split(","):
        per, types = objects_per_size(name, sizes)
        top = ", ".join(f"{t} {n / sizes:.1f}" for t, n in types.most_common(8))
        table.add_row(name, f"{per:.0f}", top)
    Console(width=160).print(table)


if __name__ == "__main__":
    main()
