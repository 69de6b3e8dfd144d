"""A small thread-safe cache of arena layouts, keyed by input signature.

A service alternating between a few batch sizes plans once per size. Once the cache is full,
a new signature is admitted only if it has come at least two more times than the least
recently used layout, which it then evicts (``admits``): the admission rule of TinyLFU
(Einziger, Friedman and Manes, "TinyLFU: A Highly Efficient Cache Admission Policy", 2017)
over an exact count per signature, halved every ``AGING`` × the cache's size counted events.
With more sizes than the cache holds, an LRU that admits every size turns a layout over on
every miss — each one objects the garbage collector promotes, and a full collection of the
process every few thousand calls; counting keeps the sizes that come most and turns nothing
over while the traffic's mix holds, and a size that grows frequent displaces one that no
longer is.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Hashable
from typing import Any

import torch

#: counts are halved once this many times the cache's size events were counted
AGING = 10


class LayoutCache:
    """Layouts by signature: the most recently used last; how often each signature came
    (``count``: a lookup, a switch to it, an admission asked) for ``admits``."""

    def __init__(self, maxsize: int):
        if maxsize < 1:
            raise ValueError("the plan cache holds at least one layout")
        self.maxsize = maxsize
        self._items: OrderedDict[Hashable, Any] = OrderedDict()
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0
        #: signature → how often it came since the counts were last halved
        self._counts: dict[Hashable, int] = {}
        self._events = 0
        #: admissions ``admits`` refused
        self.refused = 0

    def _count(self, key: Hashable) -> int:
        """One more event of ``key`` (the lock held); its count."""
        counts = self._counts
        n = counts[key] = counts.get(key, 0) + 1
        self._events += 1
        if self._events >= AGING * self.maxsize:
            # (every count halved, the zeros dropped: the counts follow the traffic's mix
            # as it changes, and hold at most AGING × maxsize signatures)
            self._events = 0
            self._counts = {k: c // 2 for k, c in counts.items() if c > 1}
        return n

    def get(self, key: Hashable) -> Any | None:
        with self._lock:
            item = self._items.get(key)
            if item is None:
                self.misses += 1
                return None
            self._items.move_to_end(key)
            self._count(key)
            self.hits += 1
            return item

    def touch(self, key: Hashable, item: Any) -> bool:
        """Whether ``key`` still maps to ``item`` (then a hit, and the most recent); a
        miss is not counted: the caller looks it up again."""
        with self._lock:
            if self._items.get(key) is not item:
                return False
            self._items.move_to_end(key)
            self._count(key)
            self.hits += 1
            return True

    def admits(self, key: Hashable) -> bool:
        """Counts one coming of ``key``, not in the cache; whether a layout of it should go
        in: while there is room, always; once full, if it has come at least two more times
        than the least recently used layout, which ``put`` would evict (not one: with
        counts about equal — traffic of more sizes than the cache holds, each as likely —
        a lead of one is chance, and admitting on it turned layouts over on ~15 % of the
        misses of ``benchmarks/gc_pauses.py``'s recommender)."""
        with self._lock:
            n = self._count(key)
            if len(self._items) < self.maxsize:
                return True
            victim = next(iter(self._items))
            if n > self._counts.get(victim, 0) + 1:
                return True
            self.refused += 1
            return False

    def count(self, key: Hashable) -> int:
        """How often ``key`` came since the counts were last halved."""
        return self._counts.get(key, 0)  # (a dict lookup: atomic)

    def put(self, key: Hashable, item: Any) -> None:
        with self._lock:
            if key not in self._items:
                self._counts.setdefault(key, 1)
            self._items[key] = item
            self._items.move_to_end(key)
            while len(self._items) > self.maxsize:
                self._items.popitem(last=False)

    def __contains__(self, key: Hashable) -> bool:
        return key in self._items  # (a dict lookup: atomic; neither a hit nor a miss)

    def discard(self, key: Hashable) -> None:
        with self._lock:
            self._items.pop(key, None)

    def most_recent_item(self) -> tuple[Hashable, Any] | None:
        with self._lock:
            return next(reversed(self._items.items()), None)

    def most_recent(self) -> Any | None:
        with self._lock:
            return next(reversed(self._items.values()), None)

    def __len__(self) -> int:
        return len(self._items)


def signature(inputs: list[Any]) -> tuple:
    """What a memory layout depends on: tensor dtypes and shapes (inside lists and tuples
    too), the device of a tensor not on the CPU, and the values of ints, bools and strings,
    which may shape intermediates."""
    Tensor = torch.Tensor
    return tuple([(x.dtype, x.shape) if type(x) is Tensor and x.is_cpu else _sig(x)
                  for x in inputs])


def _sig(x: Any) -> Hashable:
    if isinstance(x, torch.Tensor):
        return (x.dtype, x.shape) if x.is_cpu else (x.dtype, x.shape, x.device)
    if isinstance(x, (int, str)):  # bool is an int
        return (type(x), x)
    if isinstance(x, (list, tuple)):
        return (type(x), tuple(_sig(e) for e in x))
    if isinstance(x, dict):
        return (dict, tuple((k, _sig(v)) for k, v in x.items()))
    return type(x)


def structure(key: tuple) -> tuple:
    """A signature (``signature``) with each tensor's shape reduced to its rank: what stays
    the same across sizes."""
    return tuple(_structure(k) for k in key)


def _structure(k: Any) -> Hashable:
    if isinstance(k, tuple) and len(k) >= 2 and isinstance(k[0], torch.dtype) \
            and isinstance(k[1], torch.Size):
        return (k[0], len(k[1]), *k[2:])
    if isinstance(k, tuple) and len(k) == 2 and k[0] in (list, tuple):
        return (k[0], tuple(_structure(e) for e in k[1]))
    if isinstance(k, tuple) and len(k) == 2 and k[0] is dict:
        return (dict, tuple((name, _structure(v)) for name, v in k[1]))
    return k
