"""What checking out variants costs (``runtime/checks.py``): first calls, and steady state.

For each model, fresh ``StaticModule``s with ``check_out_variants`` on and off, built
alternately, and per module (one thread):

* ``first``: the first call — it records the signature's sizes, allocating; with the checks
  on it also runs each out-variant node's out variant once into a scratch tensor and
  compares;
* ``second``: the first call from the arena (plans nothing, generates the code);
* ``new size``: the first call of a second batch size (recorded again; nothing to check:
  same dtypes and ranks);
* ``steady``: median µs per call afterwards, the two modules alternated in one process.

Medians over ``--repeats`` module builds; ratios are on ÷ off.

    python benchmarks/checks.py [--models mlp,dlrm,...] [--zoo] [--repeats 5]
"""

from __future__ import annotations

import statistics
import time
import warnings

import click
import torch
from rich.console import Console
from rich.table import Table

import static_runtime as sr
from static_runtime.compare import median_us
from static_runtime.models import MODELS


def _models(names: str, zoo: bool) -> dict[str, tuple]:
    """name → (scripted module factory, inputs at the first batch, inputs at the second)."""
    out = {}
    for name in (n for n in names.split(",") if n):
        spec = MODELS[name]
        out[name] = (lambda s=spec: torch.jit.script(s.build()), spec.example_inputs(batch=1),
                     spec.example_inputs(batch=4))
    if zoo:
        from benchmarks.zoo import ZOO

        for name, m in ZOO.items():
            small, large = m.batches
            out[name] = (m.scripted, m.inputs(small), m.inputs(large))
    return out


def _first_calls(make, inputs, other, check: bool) -> tuple[float, float, float, object]:
    opts = sr.StaticModuleOptions(check_out_variants=check)
    mod = sr.StaticModule(make(), options=opts)
    times = []
    for args in (inputs, inputs, other):
        start = time.perf_counter()
        mod(*args)
        times.append((time.perf_counter() - start) * 1e3)
    mod(*other)
    for _ in range(opts.specialize_after + 1):  # hot: its own code, built in the background
        mod(*inputs)
    mod._codes.builder.wait()
    return times[0], times[1], times[2], mod


@click.command()
@click.option("--models", default=",".join(MODELS), show_default=True,
              help="built-in models (static_runtime.models)")
@click.option("--zoo/--no-zoo", default=False, help="the model zoo too")
@click.option("--repeats", default=5, show_default=True, help="module builds per setting")
def main(models: str, zoo: bool, repeats: int) -> None:
    torch.set_num_threads(1)
    warnings.simplefilter("ignore")
    table = Table(title="out-variant checks: on ÷ off (first calls in ms, steady in µs)")
    for col in ("model", "first on", "first off", "÷", "second ÷", "new size ÷",
                "steady on", "steady off", "÷"):
        table.add_column(col, justify="left" if col == "model" else "right", no_wrap=True)
    ratios = []
    for name, (make, inputs, other) in _models(models, zoo).items():
        cells: dict[bool, list[tuple]] = {True: [], False: []}
        mods = {}
        with torch.inference_mode():
            for _ in range(repeats):
                for check in (True, False):
                    *t, mods[check] = _first_calls(make, inputs, other, check)
                    cells[check].append(t)
            on, off = mods[True], mods[False]
            steady = median_us({"on": lambda: on(*inputs), "off": lambda: off(*inputs)},  # noqa: B023
                               repeats=9, calls=30)
        med = {c: [statistics.median(x[i] for x in cells[c]) for i in range(3)]
               for c in cells}
        first = med[True][0] / med[False][0]
        ratios.append(first)
        table.add_row(name, f"{med[True][0]:.2f}", f"{med[False][0]:.2f}", f"{first:.2f}",
                      f"{med[True][1] / med[False][1]:.2f}",
                      f"{med[True][2] / med[False][2]:.2f}",
                      f"{steady['on']:.1f}", f"{steady['off']:.1f}",
                      f"{steady['on'] / steady['off']:.2f}")
    Console(width=150).print(table)
    if ratios:
        geo = statistics.geometric_mean(ratios)
        print(f"geomean of the first call, on ÷ off: {geo:.2f}")


if __name__ == "__main__":
    main()
