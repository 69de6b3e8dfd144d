"""The traffic benchmark's statistics: its percentile helper agrees with the definition, and
size ratios take the mix of sizes out. Nothing here is timed."""

from __future__ import annotations

import pytest

from benchmarks.traffic_stats import percentile, size_ratios, summary


def test_percentile_and_summary():
    xs = [float(x) for x in range(1, 101)]
    assert percentile(xs, 50) == pytest.approx(50.5)
    assert percentile(xs, 99) == pytest.approx(99.01)
    assert percentile([], 50) != percentile([], 50)  # nan
    s = summary([1.0, 2.0, 3.0, 10.0])
    assert s["mean"] == 4.0 and s["p50"] == 2.5


def test_size_ratios_take_out_the_size_mix():
    trace = [8, 256, 8, 256]
    replays = [[1.0, 10.0, 1.0, 10.0], [1.0, 10.0, 2.0, 10.0]]
    ratios = size_ratios(trace, replays)
    assert ratios[0] == [1.0, 1.0, 1.0, 1.0]
    assert ratios[1] == [1.0, 1.0, 2.0, 1.0]
