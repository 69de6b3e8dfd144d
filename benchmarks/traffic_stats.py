"""The traffic benchmark's statistics: percentiles, the per-replay summary, and each call's
time over its size's median (the tail beyond the mix of sizes)."""

from __future__ import annotations

import statistics
from typing import Any

import numpy as np


def percentile(samples: list[float], q: float) -> float:
    """The ``q``-th percentile (0…100) of ``samples``, linear between closest ranks (NumPy's
    default)."""
    if not samples:
        return float("nan")
    return float(np.percentile(np.asarray(samples, dtype=np.float64), q))


def summary(samples_us: list[float]) -> dict[str, float]:
    """Mean, p50 and p99 of per-call µs."""
    return {"mean": statistics.fmean(samples_us), "p50": percentile(samples_us, 50),
            "p99": percentile(samples_us, 99)}


def size_ratios(trace: list, replays: list[list[float]]) -> list[list[float]]:
    """Each call's time over the median time of calls of its size (over all replays), per
    replay: what is left of the p99 once the mix of sizes is taken out — a trace mixing
    length 8 and 256 has p99 ≫ p50 on any runtime."""
    by_size: dict[Any, list[float]] = {}
    for times in replays:
        for size, t in zip(trace, times):
            by_size.setdefault(size, []).append(t)
    typical = {size: statistics.median(ts) for size, ts in by_size.items()}
    return [[t / typical[size] for size, t in zip(trace, times)] for times in replays]
