"""A small thread-safe LRU of arena layouts, keyed by input signature.

A service alternating between a few batch sizes plans once per size; a new signature beyond
the cache's size evicts the least recently used layout.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Hashable
from typing import Any

import torch


class LayoutCache:
    def __init__(self, maxsize: int):
        if maxsize < 1:
            raise ValueError("the plan cache holds at least one layout")
        self.maxsize = maxsize
        self._items: OrderedDict[Hashable, Any] = OrderedDict()
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0

    def get(self, key: Hashable) -> Any | None:
        with self._lock:
            item = self._items.get(key)
            if item is None:
                self.misses += 1
                return None
            self._items.move_to_end(key)
            self.hits += 1
            return item

    def touch(self, key: Hashable, item: Any) -> bool:
        """Whether ``key`` still maps to ``item`` (then a hit, and the most recent); a
        miss is not counted: the caller looks it up again."""
        with self._lock:
            if self._items.get(key) is not item:
                return False
            self._items.move_to_end(key)
            self.hits += 1
            return True

    def put(self, key: Hashable, item: Any) -> None:
        with self._lock:
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


class Sightings:
    """Signatures seen once and not laid out (thread-safe, the ``maxsize`` most recent).

    While the layout cache is full, a size a request brings once evicts no layout: its first
    call runs code that allocates (``CodegenExecutor._run_once``), and only a size that
    comes back gets a layout. ``first(key)`` is True on a signature's first sighting (or first since it fell
    out of the record); False on its second, which forgets it: the caller lays it out."""

    def __init__(self, maxsize: int):
        self.maxsize = maxsize
        self._items: OrderedDict[Hashable, None] = OrderedDict()
        self._lock = threading.Lock()

    def first(self, key: Hashable) -> bool:
        with self._lock:
            items = self._items
            if key in items:
                del items[key]
                return False
            items[key] = None
            if len(items) > self.maxsize:
                items.popitem(last=False)
            return True

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
