"""The traffic benchmark's request traces: deterministic, and shaped as documented."""

from __future__ import annotations

import statistics

import pytest

from benchmarks.traffic_workloads import (
    IMAGE_BATCHES,
    IMAGE_SIDES,
    MAX_BATCH,
    MAX_LENGTH,
    batch_sizes,
    image_sizes,
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
