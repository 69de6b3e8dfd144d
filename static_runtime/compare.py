"""Side-by-side comparison with the runtimes people use today, in one process.

Used by the demo, the ``bench`` command and ``benchmarks/``. Timing follows the house
rules: single-threaded unless asked otherwise, runners alternated within each repeat so
machine noise hits them alike, medians of repeats reported.
"""

from __future__ import annotations

import statistics
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

import static_runtime as sr


@dataclass
class Runner:
    """One way of running the model: ``fn()`` runs it once on the fixed inputs."""

    name: str
    fn: Callable[[], Any]
    setup_seconds: float
    note: str = ""


@dataclass
class Timing:
    name: str
    samples_us: list[float] = field(default_factory=list)

    @property
    def median_us(self) -> float:
        return statistics.median(self.samples_us)


def _timed_setup(make: Callable[[], Callable[[], Any]]) -> tuple[Callable[[], Any], float]:
    start = time.perf_counter()
    fn = make()
    return fn, time.perf_counter() - start


def make_runners(model: torch.nn.Module, inputs: tuple, *,
                 include: tuple[str, ...] = ("eager", "torchscript", "pytorch_static_runtime",
                                             "static_runtime")) -> list[Runner]:
    """Runners for ``model`` on ``inputs``. A peer that cannot run the model is reported with
    a note instead of a runner function (``fn`` raises)."""
    model = model.eval()
    runners: list[Runner] = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        scripted = torch.jit.script(model)
    for name in include:
        try:
            if name == "eager":
                def make():
                    def run():
                        with torch.inference_mode():
                            return model(*inputs)
                    return run
            elif name == "torchscript":
                def make():
                    with warnings.catch_warnings():
                        warnings.simplefilter("ignore", DeprecationWarning)
                        frozen = torch.jit.freeze(torch.jit.script(model))
                    def run():
                        with torch.inference_mode():
                            return frozen(*inputs)
                    return run
            elif name == "pytorch_static_runtime":
                def make():
                    sm = torch._C._jit_to_static_module(scripted._c)
                    return lambda: sm(*inputs)
            elif name == "static_runtime":
                def make():
                    mod = sr.StaticModule(scripted)
                    rt = mod.runtime()
                    return lambda: rt(*inputs)
            else:
                raise ValueError(f"unknown runner {name!r}")
            fn, seconds = _timed_setup(make)
            fn()  # first call outside timing; also proves the peer can run the model
            runners.append(Runner(name, fn, seconds))
        except Exception as e:  # noqa: BLE001  (a peer that cannot run the model is reported)
            first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
            runners.append(Runner(name, _refused(first), float("nan"), note=first))
    return runners


def _refused(reason: str) -> Callable[[], Any]:
    def fn():
        raise RuntimeError(reason)

    return fn


def outputs_agree(runners: list[Runner], reference: str = "eager") -> dict[str, bool | None]:
    """Whether each runner's output equals the reference's (None where it cannot run)."""
    ref = next(r for r in runners if r.name == reference).fn()
    result: dict[str, bool | None] = {}
    for r in runners:
        if r.note:
            result[r.name] = None
            continue
        try:
            torch.testing.assert_close(r.fn(), ref, rtol=1e-4, atol=1e-5)
            result[r.name] = True
        except AssertionError:
            result[r.name] = False
    return result


def time_runners(runners: list[Runner], *, repeats: int = 15, calls: int = 50,
                 warmup: int = 20,
                 progress: Callable[[int], None] | None = None) -> dict[str, Timing]:
    """µs per call for each runnable runner: ``repeats`` samples of ``calls`` calls each,
    runners alternated within every repeat."""
    live = [r for r in runners if not r.note]
    for r in live:
        for _ in range(warmup):
            r.fn()
    timings = {r.name: Timing(r.name) for r in live}
    clock = time.perf_counter_ns
    for k in range(repeats):
        for r in live:
            fn = r.fn
            start = clock()
            for _ in range(calls):
                fn()
            timings[r.name].samples_us.append((clock() - start) / calls / 1e3)
        if progress is not None:
            progress(k)
    return timings
