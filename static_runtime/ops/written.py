"""What an out variant wrote before, by the tensor it wrote: the calls of a node that writes
an arena tensor, found again after a change of size.

A measured out variant keeps its last call's facts (the tensor it wrote, the input's shape,
the thread count, the call made) so that the next call writing the same tensor checks a few
facts and makes one call. The arena hands the same tensor on every call of a layout — but
traffic of many sizes switches layouts on most calls, and with one slot every switch missed
and took the slow path (a lookup by shape, the output's checks: ~3.4 µs a GEMM node on the
Xeon, ~150 µs a call of ``benchmarks/traffic.py``'s text encoder, ~15 % of its steady call).
So each node also keeps the facts of the tensors it wrote before, by the tensor's ``id``,
holding the tensor by a weak reference: it neither keeps an arena alive after its runtime
dropped it nor mistakes a new tensor that took a dead one's ``id`` for it.

A node's call site looks its last slot up first (one identity test on the steady path) and
this table only when the slot holds another tensor (``find_written``). Entries are bounded as
the kernels' other per-shape caches are (``ckernels.remember``).
"""

from __future__ import annotations

import weakref
from typing import Any

from static_runtime.ops.ckernels import remember


def keep_written(written: dict[int, tuple], out: Any, *facts: Any) -> None:
    """``written[id(out)] = (a weak reference to out, *facts)``, the oldest entry dropped past
    ``ckernels.remember``'s bound."""
    remember(written, id(out), (weakref.ref(out), *facts))


def find_written(written: dict[int, tuple], out: Any) -> tuple | None:
    """The entry ``keep_written`` made for this very tensor, or None (none was made, or the
    tensor it was made for is gone and ``out`` took its ``id``)."""
    entry = written.get(id(out))
    return entry if entry is not None and entry[0]() is out else None
