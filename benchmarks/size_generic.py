"""What one binding for every size would cost: issue 18's "one generated function for a range
of sizes" measured against what the runtime does (a layout and a binding per size).

The alternative is built here from the runtime's own parts, as the C++ Static Runtime works:
the shape program's code that keeps nothing per binding (``CodeCache.generic(kept=False)``,
what a size the layout cache does not admit runs, allocating) bound once to one tensor per
arena value, each a view of the region the largest layout reserved for it, **restrided in
place** (``as_strided_``) to a call's sizes, which the shape program computes. A new size then
costs no layout, no binding and no per-binding values kept: every value its size decides (a
mask, positions, a size turned into a tensor) is computed on every call instead.

Per workload (``traffic_workloads.py``): a module warmed on the trace's three largest sizes
(so their layout's regions hold every smaller size), then new sizes, alternately measured
with the runtime first (its first call of the size, then steady calls, then the one binding's
steady calls) and with the one binding first (its first call, its steady calls, then the
runtime's first call of the size, which finds every kernel's per-shape work done, and its
steady calls). Medians over the sizes, µs. Each size's results of the two ways are compared
(``torch.equal``): the alternative computes what the runtime does.

    python benchmarks/size_generic.py [--workloads text,recsys] [--sizes 40]
"""

from __future__ import annotations

import statistics
import sys
import time
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
from static_runtime.memory.arena import contiguous_strides, fits, materialize
from static_runtime.memory.cache import signature, structure
from static_runtime.runtime.hot import wait_for_builds


class OneBinding:
    """The shape program's keep-nothing code bound once to arena tensors restrided per call."""

    def __init__(self, runtime, inputs: list):
        executor = runtime._interp
        memory = executor.memory
        shape_free = structure(signature(inputs))
        self.base = memory.largest[shape_free]
        self.programs = memory.programs.get(shape_free)
        # (regions of their own: the runtime's layouts keep theirs)
        self.tensors = materialize(self.base.specs, executor.arena, {})
        slots = frozenset(self.tensors)
        self._fns = {}
        for program in self.programs:
            code = executor.codes.generic(slots, program=program, kept=False)
            self._fns[id(program)] = code.factory(
                *[self.tensors[s] for s in code.arena_slots], executor._refused, None)
        self._items = list(self.tensors.items())

    def covers(self, inputs) -> bool:
        """Whether a program covers these sizes and they fit the warm sizes' regions."""
        found = self._program(list(inputs))
        return found is not None and fits(self.base, found[0].index, found[0].dtypes, found[1])

    def _program(self, inputs: list):
        for program in self.programs:
            computed = program.evaluate(inputs)
            if computed is not None:
                return program, computed
        return None

    def __call__(self, *inputs):
        inputs = list(inputs)
        program, computed = self._program(inputs)
        index = program.index
        for slot, t in self._items:
            shape, strides = computed[index[slot]]
            t.as_strided_(shape, strides or contiguous_strides(shape))
        return self._fns[id(program)](*inputs)


def _size_of(size) -> int:
    return size if isinstance(size, int) else int(torch.tensor(size).prod())


def _tensors(x) -> list[torch.Tensor]:
    """The tensors of an output, in order (the generated function returns a flat list; the
    runtime the model's structure)."""
    if isinstance(x, torch.Tensor):
        return [x]
    if isinstance(x, dict):
        x = list(x.values())
    if isinstance(x, (list, tuple)):
        return [t for item in x for t in _tensors(item)]
    return []


def _same(a, b) -> bool:
    ta, tb = _tensors(a), _tensors(b)
    return len(ta) == len(tb) and all(torch.equal(x, y) for x, y in zip(ta, tb))


def probe(name: str, sizes: int) -> dict:
    w = WORKLOADS[name]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = w.model().eval()
        scripted = w.script(model)
    runtime = sr.StaticModule(scripted).runtime()
    distinct = list(dict.fromkeys(w.trace(20000, 0)))
    warm = sorted(distinct, key=_size_of)[-3:]
    fresh = [s for s in distinct if s not in warm]
    for s in warm:
        for _ in range(5):
            runtime(*w.inputs(s))
    wait_for_builds()
    for s in warm:
        for _ in range(3):
            runtime(*w.inputs(s))
    one = OneBinding(runtime, list(w.inputs(warm[0])))
    covered = [s for s in fresh if one.covers(w.inputs(s))]
    uncovered = len(fresh[:sizes]) - len(covered[:sizes])
    fresh = covered[:sizes]
    clock = time.perf_counter_ns
    got: dict[str, list[float]] = {k: [] for k in (
        "runtime first", "runtime steady", "one binding first", "one binding steady",
        "runtime first after one binding's")}
    mismatches = 0

    def timed(fn, args) -> tuple[float, object]:
        start = clock()
        out = fn(*args)
        return (clock() - start) / 1e3, out

    def steady(fn, s) -> float:
        calls = [timed(fn, w.request(s, i))[0] for i in range(1, 5)]
        return statistics.median(calls[1:])

    for i, s in enumerate(fresh):
        x = w.inputs(s)
        if i % 2 == 0:
            t, ours = timed(runtime, x)
            got["runtime first"].append(t)
            got["runtime steady"].append(steady(runtime, s))
            got["one binding steady"].append(steady(one, s))
            other = one(*x)
        else:
            t, other = timed(one, x)
            got["one binding first"].append(t)
            got["one binding steady"].append(steady(one, s))
            t, ours = timed(runtime, x)
            got["runtime first after one binding's"].append(t)
            got["runtime steady"].append(steady(runtime, s))
        mismatches += not _same(ours, other)
    return {"sizes": len(fresh), "mismatches": mismatches, "uncovered": uncovered,
            "us": {k: statistics.median(v) for k, v in got.items() if v}}


@click.command()
@click.option("--workloads", default="text,recsys", show_default=True)
@click.option("--sizes", default=40, show_default=True, help="new sizes per workload")
def main(workloads: str, sizes: int) -> None:
    torch.set_num_threads(1)
    console = Console(width=120)
    for name in workloads.split(","):
        r = probe(name, sizes)
        table = Table(title=f"{name}: {r['sizes']} new sizes, medians (µs); results differing "
                            f"between the two ways: {r['mismatches']} (sizes no program "
                            f"of the warm ones covers, skipped: {r['uncovered']})")
        table.add_column("call")
        table.add_column("µs", justify="right")
        table.add_column("÷ runtime steady", justify="right")
        base = r["us"]["runtime steady"]
        for k, v in r["us"].items():
            table.add_row(k, f"{v:.0f}", f"{v / base:.2f}")
        console.print(table)


if __name__ == "__main__":
    main()
