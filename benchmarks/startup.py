"""Start-up: a saved prepared module (``sr.load``) against preparing from scratch.

For each built-in model, both start a fresh Python process (``import static_runtime`` done,
not timed) and time, from a file on disk:

* ``prepare``: ``StaticModule(path_to_torchscript_archive)`` — ``torch.jit.load``, freezing,
  import, the passes, operator selection, lifetimes;
* ``load``: ``sr.load(path_to_prepared_module)`` — read and check the file, parse the
  graph, select operators again (no freezing, no passes);

then the first call on the example inputs (plans the arena, generates code), then the same
build again in that process ("again": what each further model costs a process that has
loaded PyTorch's operator signature tables for the fast bindings once). Medians over
``--repeats`` processes per cell, one thread.

    python benchmarks/startup.py [--models mlp,dlrm] [--repeats 3]
"""

from __future__ import annotations

import statistics
import sys
import tempfile
from pathlib import Path

import click
import torch
from rich.console import Console
from rich.table import Table

import static_runtime as sr
from static_runtime.models import MODELS

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # (run as a script: the helpers are imported from the root)
    sys.path.insert(0, str(ROOT))

from benchmarks.workers import run_script

_CHILD = """
import json, sys, time, warnings
import torch
torch.set_num_threads(1)
warnings.simplefilter("ignore", DeprecationWarning)
import static_runtime as sr
from static_runtime.models import MODELS
mode, name, path = sys.argv[1:4]
inputs = MODELS[name].example_inputs(batch=4)
build = (lambda: sr.StaticModule(path)) if mode == "prepare" else (lambda: sr.load(path))
t0 = time.perf_counter()
mod = build()
t1 = time.perf_counter()
mod(*inputs)
t2 = time.perf_counter()
build()  # again: the per-process tables (operator bindings) are loaded now
t3 = time.perf_counter()
print(json.dumps({"build": t1 - t0, "first_call": t2 - t1, "again": t3 - t2}))
"""


@click.command()
@click.option("--models", default=",".join(MODELS), show_default=True)
@click.option("--repeats", default=2, show_default=True, help="fresh processes per cell")
def main(models: str, repeats: int) -> None:
    table = Table(title=f"start-up in a fresh process, ms (median of {repeats}), "
                        f"torch {torch.__version__}")
    for col in ("model", "prepare: fresh", "load: fresh", "prepare: again", "load: again",
                "speed-up again", "prepare: 1st call", "load: 1st call", "file KiB"):
        table.add_column(col, justify="right")
    with tempfile.TemporaryDirectory() as tmp:
        for name in models.split(","):
            scripted = torch.jit.script(MODELS[name].build())
            pt, srm = Path(tmp) / f"{name}.pt", Path(tmp) / f"{name}.srm"
            torch.jit.save(scripted, str(pt))
            sr.StaticModule(scripted).save(srm)
            runs = {mode: [run_script(_CHILD, mode, name, p) for _ in range(repeats)]
                    for mode, p in (("prepare", pt), ("load", srm))}
            med = {(mode, k): statistics.median(r[k] for r in rs) * 1e3
                   for mode, rs in runs.items() for k in ("build", "first_call", "again")}
            table.add_row(name, f"{med['prepare', 'build']:.1f}", f"{med['load', 'build']:.1f}",
                          f"{med['prepare', 'again']:.1f}", f"{med['load', 'again']:.1f}",
                          f"{med['prepare', 'again'] / med['load', 'again']:.1f}x",
                          f"{med['prepare', 'first_call']:.1f}",
                          f"{med['load', 'first_call']:.1f}", f"{srm.stat().st_size / 1024:.0f}")
    Console(width=140).print(table)


if __name__ == "__main__":
    main()
