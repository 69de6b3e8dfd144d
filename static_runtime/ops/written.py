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

A node's call site reads an entry as ``e = written.get(id(out))`` and takes it only if
``e[0]() is out`` (inlined: a helper's frame is what the lookup saves).
"""

from __future__ import annotations

import weakref
from typing import Any

#: the most tensors a node keeps facts for (the oldest dropped): a runtime's layouts of one
#: structure (``StaticModuleOptions.plan_cache_size``, 256) times a few runtimes of a pool
#: would want more, but an entry missed only costs the slow path once per layout switch
MAX_WRITTEN = 512


def keep_written(written: dict[int, tuple], out: Any, *facts: Any) -> None:
    """``written[id(out)] = (a weak reference to out, *facts)``, the oldest entry dropped past
    ``MAX_WRITTEN``."""
    if len(written) >= MAX_WRITTEN:
        try:
            del written[next(iter(written))]
        except (RuntimeError, KeyError, StopIteration):  # (another thread changed it)
            pass
    written[id(out)] = (weakref.ref(out), *facts)
