"""The traffic benchmark's pure parts: its request traces are deterministic and shaped as
documented, and its percentile helper agrees with the definition. Nothing here is timed."""

from __future__ import annotations

import statistics

import pytest

from benchmarks.traffic import (
    IMAGE_BATCHES,
    IMAGE_SIDES,
    MAX_BATCH,
    MAX_LENGTH,
    batch_sizes,
    image_sizes,
    percentile,
    size_ratios,
    summary,
    text_lengths,
)


@pytest.mark.parametrize("trace", [text_lengths, batch_sizes, image_sizes])
def test_traces_are_deterministic(trace):
    assert trace(500, 3) == trace(500, 3)
    assert trace(500, 3) != trace(500, 4)
    assert len(trace(77)) == 77


def test_text_lengths_have_many_sizes_and_a_long_tail():
    lengths = text_lengths(2000)
    assert min(lengths) >= 8 and max(lengths) <= MAX_LENGTH
    assert len(set(lengths)) >= 150
    assert 25 <= statistics.median(lengths) <= 60
    assert max(lengths) >= 200


def test_batch_sizes_are_skewed_small_with_a_tail():
    batches = batch_sizes(2000)
    assert min(batches) >= 1 and max(batches) <= MAX_BATCH
    assert statistics.median(batches) <= 20
    assert max(batches) >= 200
    assert len(set(batches)) >= 100


def test_image_sizes_come_from_the_grid():
    sizes = image_sizes(1000)
    assert set(sizes) <= {(b, s) for b in IMAGE_BATCHES for s in IMAGE_SIDES}
    assert len(set(sizes)) == len(IMAGE_BATCHES) * len(IMAGE_SIDES)


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
