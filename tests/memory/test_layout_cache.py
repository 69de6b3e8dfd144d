"""The layout cache (``memory/cache.py``): least recently used layouts evicted, admission
once full by how often a signature came (TinyLFU's rule), counts halved as they age; and
the kernels' per-shape caches (``ckernels.remember``)."""

from __future__ import annotations

import gc
import random

import torch

from static_runtime.memory import cache as C
from static_runtime.ops import ckernels


def _filled(n: int) -> C.LayoutCache:
    lc = C.LayoutCache(n)
    for k in range(n):
        assert lc.admits(k)  # (room: always)
        lc.put(k, f"layout {k}")
    return lc


def test_a_new_signature_is_admitted_once_it_comes_more_often_than_the_one_it_evicts():
    lc = _filled(4)
    assert not lc.admits("new") and not lc.admits("new")  # 1, 2 against the oldest's 1
    assert lc.refused == 2
    assert lc.admits("new")  # 3 > 1 + 1
    lc.put("new", "layout new")
    assert list(lc._items) == [1, 2, 3, "new"]  # the least recently used went


def test_a_layout_in_use_is_not_displaced_by_a_size_that_comes_as_often():
    lc = _filled(3)
    for _ in range(5):
        for k in range(3):
            assert lc.get(k) == f"layout {k}"  # each used again and again
        assert not lc.admits("rare")
    assert sorted(lc._items) == [0, 1, 2]


def test_traffic_of_more_sizes_than_the_cache_holds_turns_few_layouts_over():
    """Uniformly random sizes, twice as many as the cache holds: an LRU admitting every
    size evicts on every miss; counting admits a small share of them."""
    lc = _filled(64)
    rng = random.Random(0)
    misses = evictions = 0
    for _ in range(20_000):
        k = rng.randrange(128)
        if lc.get(k) is None:
            misses += 1
            if lc.admits(k):
                evictions += 1
                lc.put(k, f"layout {k}")
    assert len(lc) == 64
    assert misses > 5_000
    assert evictions < 0.2 * misses


def test_a_size_that_becomes_frequent_displaces_one_that_no_longer_is():
    lc = _filled(8)
    for _ in range(30):  # the first mix, used a while
        for k in range(8):
            lc.get(k)
    admitted_after = None
    for call in range(2_000):  # the mix changes: "hot" every other call, 0…7 no more
        if lc.get("hot") is None and lc.admits("hot"):
            lc.put("hot", "layout hot")
            admitted_after = call
            break
        lc.get(100 + call % 50) or lc.admits(100 + call % 50)
    assert admitted_after is not None and admitted_after < 1_000  # (counts age)
    assert "hot" in lc._items


def test_counts_are_halved_as_they_age_and_stay_bounded():
    lc = C.LayoutCache(4)
    for k in range(C.AGING * 4 - 1):
        lc.admits(("once", k))
    assert len(lc._counts) == C.AGING * 4 - 1
    lc.admits(("once", "last"))  # the events reach AGING × maxsize: halved, zeros dropped
    assert lc._counts == {}
    for _ in range(3):
        lc.admits("often")
    assert lc._counts == {"often": 3}


def test_remember_drops_the_oldest_entry_and_keeps_sizes_as_plain_tuples(monkeypatch):
    monkeypatch.setattr(ckernels, "_MAX_SHAPES", 3)
    cache: dict = {}
    shapes = [torch.Size([n, 4]) for n in range(5)]
    for n, shape in enumerate(shapes):
        assert ckernels.remember(cache, (shape, 1), n) == n
    assert list(cache) == [((2, 4), 1), ((3, 4), 1), ((4, 4), 1)]  # the oldest dropped
    assert all(type(k[0]) is tuple for k in cache)
    assert cache[(shapes[3], 1)] == 3  # looked up by the Size it equals
    ckernels.remember(cache, shapes[0], "bare")
    assert type(next(reversed(cache))) is tuple
    gc.collect()
    gc.collect()
    assert not any(gc.is_tracked(k) for k in cache)  # (numbers only: the collector lets go)
