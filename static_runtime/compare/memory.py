"""Tensor memory of a runner's steady-state call, as PyTorch's CPU allocator sees it, and
the bytes our runtime holds between calls (its arena)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import static_runtime as sr
from static_runtime.compare.quiet import _quiet_stderr
from static_runtime.compare.runner import Runner


def _arena_bytes(mod: sr.StaticModule | None) -> Callable[[], int] | None:
    """Bytes of ``mod``'s most recent arena, read when asked (after the runner's calls)."""
    if mod is None:
        return None

    def held() -> int:
        try:
            return mod.memory_plan().arena_bytes
        except RuntimeError:  # memory planning off, or no plan yet: no arena is held
            return 0

    return held


@dataclass(frozen=True)
class MemoryFigures:
    """Tensor memory of one steady-state call, as PyTorch's CPU allocator sees it.

    ``peak_bytes``: the most bytes allocated during the call and not yet freed, above what
    was allocated when it began (outputs included; weights, which exist before, are not).
    ``allocated_bytes``: all bytes allocated during the call. ``held_bytes``: tensor memory
    the runner keeps between calls (our arena: PyTorch's C++ Static Runtime allocates and
    frees its managed buffer within each call, so it shows up in its peak instead).
    ``total_bytes = peak_bytes + held_bytes``: what a call needs.
    """

    peak_bytes: int
    allocated_bytes: int
    allocations: int
    held_bytes: int

    @property
    def total_bytes(self) -> int:
        return self.peak_bytes + self.held_bytes


def measure_memory(runner: Runner) -> MemoryFigures:
    """Run ``runner`` once under ``torch.profiler`` with memory profiling and replay the
    allocator's events in order (the allocation events of the profiler's event tree carry
    each allocation's size, negative for a free). The output is dropped inside the window."""
    from torch._C._profiler import _EventType
    from torch.profiler import ProfilerActivity, profile

    if runner.note:
        raise ValueError(f"{runner.name} cannot run the model: {runner.note}")
    fn = runner.fn
    fn()
    with _quiet_stderr(), profile(activities=[ProfilerActivity.CPU], profile_memory=True) as p:
        out = fn()
        del out
    sizes: list[tuple[int, int]] = []
    stack = list(p.profiler.kineto_results.experimental_event_tree())
    while stack:
        e = stack.pop()
        if e.tag == _EventType.Allocation:
            sizes.append((e.start_time_ns, e.extra_fields.alloc_size))
        stack.extend(e.children)
    sizes.sort()
    live = peak = allocated = count = 0
    for _, n in sizes:
        live += n
        peak = max(peak, live)
        if n > 0:
            allocated += n
            count += 1
    held = runner.held_bytes() if runner.held_bytes is not None else 0
    return MemoryFigures(peak, allocated, count, held)
