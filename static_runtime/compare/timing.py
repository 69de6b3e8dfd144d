"""Timing runners side by side: alternated within each repeat so that machine noise hits
them alike, medians of repeats reported."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from static_runtime.compare.runner import Runner
from static_runtime.runtime.hot import wait_for_builds


@dataclass
class Timing:
    name: str
    samples_us: list[float] = field(default_factory=list)

    @property
    def median_us(self) -> float:
        return statistics.median(self.samples_us)


def time_runners(runners: list[Runner], *, repeats: int = 15, calls: int = 50,
                 warmup: int = 20,
                 progress: Callable[[int], None] | None = None) -> dict[str, Timing]:
    """µs per call for each runnable runner: ``repeats`` samples of ``calls`` calls each,
    runners alternated within every repeat. Each sample starts with one untimed call: with
    few calls per sample (a slow peer sets the count), the first call after another
    runner's pays for the caches that runner left cold — after ONNX Runtime's 5 ms DCN-v2
    call, 3-call samples of ours measured 1.6 × its steady state."""
    live = [r for r in runners if not r.note]
    for r in live:
        for _ in range(warmup):
            r.fn()
    # Our hot signatures get code of their own from a background thread: let it finish (the
    # first call of each sample, untimed, then takes it up).
    wait_for_builds()
    timings = {r.name: Timing(r.name) for r in live}
    clock = time.perf_counter_ns
    for k in range(repeats):
        for r in live:
            fn = r.fn
            fn()
            start = clock()
            for _ in range(calls):
                fn()
            timings[r.name].samples_us.append((clock() - start) / calls / 1e3)
        if progress is not None:
            progress(k)
    return timings


def median_us(fns: dict[str, Callable[[], Any]], *, repeats: int = 15, calls: int = 50,
              warmup: int = 20) -> dict[str, float]:
    """``time_runners`` for plain functions: name → median µs per call."""
    runners = [Runner(name, fn, 0.0) for name, fn in fns.items()]
    timings = time_runners(runners, repeats=repeats, calls=calls, warmup=warmup)
    return {name: t.median_us for name, t in timings.items()}
