"""Memory planners: where in one arena each managed tensor lives.

A planner is a pure function from tensor requests (a size and a lifetime in execution steps)
to a ``MemoryPlan`` value that can be printed, verified, plotted and compared. Planners know
nothing of graphs or torch; the caller turns reusable values into ``TensorRequest``s.

Two tensors may share bytes only if their lifetimes are disjoint. Lifetimes are inclusive
intervals of execution steps: a tensor produced by node 3 and last read by node 5 is live at
steps 3, 4 and 5, so it may not share bytes with the output of node 5 (a node's output must
not overwrite its own inputs).

Every tensor occupies its size rounded up to the alignment (64 bytes, as PyTorch's
``c10::gAlignment``), so every offset is a multiple of the alignment.

- ``plan_storage_groups``: the seed's storage groups (one buffer per group of tensors with
  disjoint lifetimes, buffers laid end to end).
- ``plan_greedy_by_size``: offsets chosen per tensor, largest first (Pisarchyk & Lee §5).
- ``plan_greedy_by_lifetime``: the same, longest-lived first.
- ``plan_best``: all three, keeping the smallest arena.
"""

from __future__ import annotations

import bisect
import enum
import heapq
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

DEFAULT_ALIGNMENT = 64


class MemoryPlanError(ValueError):
    """A memory plan or a tensor request breaks an invariant."""


@dataclass(frozen=True)
class TensorRequest:
    """One managed tensor: ``size`` bytes (unaligned), live from step ``start`` to ``end``.

    ``start`` is the index of the node that produces it, ``end`` the index of its last use
    (inclusive). ``name`` identifies it in printouts and lookups, so it must be unique
    within one plan.
    """

    name: str
    size: int
    start: int
    end: int

    def __post_init__(self) -> None:
        if self.size < 0:
            raise MemoryPlanError(f"tensor {self.name!r}: negative size {self.size}")
        if self.start > self.end:
            raise MemoryPlanError(
                f"tensor {self.name!r}: lifetime [{self.start}, {self.end}] ends before it starts")

    def overlaps(self, other: TensorRequest) -> bool:
        """Whether the two tensors are live at some common step."""
        return self.start <= other.end and other.start <= self.end


@dataclass(frozen=True)
class Placement:
    """Where a tensor lives: ``offset`` bytes into the arena; ``group`` is its storage group
    for the storage-group planner, ``None`` for planners that have no groups."""

    request: TensorRequest
    offset: int
    group: int | None = None

    @property
    def name(self) -> str:
        return self.request.name


@dataclass(frozen=True)
class MemoryPlan:
    """The arena layout for a set of tensors.

    ``arena_bytes`` is the arena size; ``lower_bound_bytes`` the most bytes ever live at once
    (no plan can use less, see ``lower_bound``). ``unplanned_bytes`` counts tensors the
    runtime does not manage; planners leave it 0 and callers set it with
    ``dataclasses.replace``. ``verify()`` checks the plan; planners' plans always pass.
    """

    placements: tuple[Placement, ...]
    arena_bytes: int
    lower_bound_bytes: int
    algorithm: str
    alignment: int
    unplanned_bytes: int = 0
    #: when a shape program lays out this plan's sizes (``runtime/symbolic.py``): each size
    #: symbol and where its value comes from (``s0`` → ``x.size(1)``) ...
    symbols: dict[str, str] = field(default_factory=dict, compare=False)
    #: ... and each tensor's shape in those symbols (``(1, s0, 128)``)
    shapes: dict[str, str] = field(default_factory=dict, compare=False)
    _by_name: dict[str, Placement] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        by_name: dict[str, Placement] = {}
        for p in self.placements:
            if p.name in by_name:
                raise MemoryPlanError(f"two tensors are named {p.name!r}")
            by_name[p.name] = p
        object.__setattr__(self, "_by_name", by_name)

    # -- lookups ------------------------------------------------------------------------------

    def __iter__(self) -> Iterator[Placement]:
        return iter(self.placements)

    def __len__(self) -> int:
        return len(self.placements)

    def __contains__(self, name: object) -> bool:
        return name in self._by_name

    def __getitem__(self, name: str) -> Placement:
        try:
            return self._by_name[name]
        except KeyError:
            raise KeyError(f"no tensor named {name!r} in this memory plan") from None

    def offset_of(self, name: str) -> int:
        """The byte offset of tensor ``name`` in the arena."""
        return self[name].offset

    def aligned_size(self, name: str) -> int:
        """The bytes tensor ``name`` occupies: its size rounded up to the alignment."""
        return align(self[name].request.size, self.alignment)

    @property
    def ratio(self) -> float:
        """``arena_bytes / lower_bound_bytes`` (1.0 when both are 0); 1.0 is optimal."""
        if self.lower_bound_bytes == 0:
            return 1.0 if self.arena_bytes == 0 else float("inf")
        return self.arena_bytes / self.lower_bound_bytes

    # -- printouts ----------------------------------------------------------------------------

    def summary(self) -> str:
        """One line: arena, tensor count, algorithm, lower bound, and unplanned bytes if any."""
        line = (f"arena {format_bytes(self.arena_bytes)} for {len(self.placements)} tensors "
                f"({self.algorithm}), lower bound {format_bytes(self.lower_bound_bytes)} "
                f"({self.ratio:.2f}x)")
        if self.unplanned_bytes:
            line += f", {format_bytes(self.unplanned_bytes)} unplanned"
        if self.symbols:
            line += "; sizes symbolic in " + ", ".join(
                f"{s} = {where}" for s, where in self.symbols.items())
        return line

    def timeline(self, width: int = 80) -> str:
        """A text picture: one row per tensor sorted by offset, execution steps across."""
        from static_runtime.memory.plot import render_timeline

        return render_timeline(self, width)

    def plot(self, path: str | Path) -> None:
        """Save a PNG of the plan: steps across, arena offset up, one rectangle per tensor."""
        from static_runtime.memory.plot import plot_memory_plan

        plot_memory_plan(self, path)

    # -- invariants ---------------------------------------------------------------------------

    def verify(self) -> None:
        """Raise ``MemoryPlanError`` unless the plan is sound.

        Sound means: every offset is a non-negative multiple of the alignment; every tensor
        ends within ``arena_bytes``; ``lower_bound_bytes`` is the lower bound of these
        requests; and no two tensors live at a common step share a byte.
        """
        a = self.alignment
        if a < 1:
            raise MemoryPlanError(f"alignment must be positive, got {a}")
        for p in self.placements:
            if p.offset < 0 or p.offset % a:
                raise MemoryPlanError(
                    f"tensor {p.name!r}: offset {p.offset} is not a non-negative multiple "
                    f"of the alignment {a}")
            top = p.offset + align(p.request.size, a)
            if top > self.arena_bytes:
                raise MemoryPlanError(
                    f"tensor {p.name!r}: bytes [{p.offset}, {top}) exceed the arena of "
                    f"{self.arena_bytes} bytes")
        expected_lb = lower_bound([p.request for p in self.placements], a)
        if self.lower_bound_bytes != expected_lb:
            raise MemoryPlanError(
                f"lower_bound_bytes is {self.lower_bound_bytes}, the requests give {expected_lb}")
        # Sweep by start: only tensors starting no later than p's end can overlap p in time.
        by_start = sorted(self.placements, key=lambda p: p.request.start)
        for i, p in enumerate(by_start):
            p_lo, p_hi = p.offset, p.offset + align(p.request.size, a)
            for q in by_start[i + 1:]:
                if q.request.start > p.request.end:
                    break
                q_lo, q_hi = q.offset, q.offset + align(q.request.size, a)
                if max(p_lo, q_lo) < min(p_hi, q_hi):
                    raise MemoryPlanError(
                        f"tensors {p.name!r} (steps {p.request.start}..{p.request.end}, bytes "
                        f"[{p_lo}, {p_hi})) and {q.name!r} (steps {q.request.start}.."
                        f"{q.request.end}, bytes [{q_lo}, {q_hi})) are live together at step "
                        f"{max(p.request.start, q.request.start)} and share bytes "
                        f"[{max(p_lo, q_lo)}, {min(p_hi, q_hi)})")


# -- helpers -----------------------------------------------------------------------------------


def align(n: int, alignment: int = DEFAULT_ALIGNMENT) -> int:
    """``n`` rounded up to a multiple of ``alignment``."""
    if alignment < 1:
        raise MemoryPlanError(f"alignment must be positive, got {alignment}")
    return -(-n // alignment) * alignment


def format_bytes(n: int) -> str:
    """``n`` bytes for people: ``"512 B"``, ``"3.1 KiB"``, ``"24.7 MiB"``, ``"1.5 GiB"``."""
    if abs(n) < 1024:
        return f"{n} B"
    for unit in ("KiB", "MiB", "GiB"):
        n /= 1024
        if abs(n) < 1024 or unit == "GiB":
            return f"{n:.1f} {unit}"
    raise AssertionError("unreachable")


def peak(requests: Iterable[TensorRequest],
         alignment: int = DEFAULT_ALIGNMENT) -> tuple[int, int | None]:
    """The most aligned bytes live at one step, and the first step where that happens
    (``None`` when there are no requests)."""
    deltas: dict[int, int] = {}
    for r in requests:
        size = align(r.size, alignment)
        deltas[r.start] = deltas.get(r.start, 0) + size
        deltas[r.end + 1] = deltas.get(r.end + 1, 0) - size
    best, best_step, live = 0, None, 0
    for step in sorted(deltas):
        live += deltas[step]
        if best_step is None or live > best:
            best, best_step = live, step
    return best, best_step


def lower_bound(requests: Iterable[TensorRequest], alignment: int = DEFAULT_ALIGNMENT) -> int:
    """The maximum over execution steps of the aligned bytes live at that step.

    Every plan's arena is at least this large, since tensors live at one step must occupy
    disjoint bytes.
    """
    return peak(requests, alignment)[0]


def _checked(requests: Iterable[TensorRequest], alignment: int) -> list[TensorRequest]:
    reqs = list(requests)
    if alignment < 1:
        raise MemoryPlanError(f"alignment must be positive, got {alignment}")
    seen: set[str] = set()
    for r in reqs:
        if r.name in seen:
            raise MemoryPlanError(f"two tensor requests are named {r.name!r}")
        seen.add(r.name)
    return reqs


# -- storage groups ----------------------------------------------------------------------------


class GroupPolicy(str, enum.Enum):  # enum.StrEnum is Python 3.11+
    """Which free storage group a new tensor joins (``plan_storage_groups``)."""

    BEST_FIT = "best_fit"
    """The free group that grows least: the smallest group at least as large as the tensor,
    else the largest group. Needs the sizes, which we have when planning."""
    LIFO = "lifo"
    """The most recently freed group, as PyTorch's ``assignStorageToManagedTensors`` does:
    the C++ runtime assigns groups when the module is built, before it knows any size."""


def plan_storage_groups(requests: Sequence[TensorRequest], alignment: int = DEFAULT_ALIGNMENT,
                        *, policy: GroupPolicy = GroupPolicy.BEST_FIT) -> MemoryPlan:
    """The seed's storage groups: tensors with disjoint lifetimes share a group, a group is
    as large as its largest (aligned) member, and groups are laid out one after another in
    the order they were opened. All members of a group have the group's offset.

    Tensors are visited in order of start step. A group is free for a tensor starting at step
    ``s`` once every member has ended before ``s``; if no group is free, a new one is opened.
    Which free group to join is ``policy``: ``BEST_FIT`` (the default; it never makes a larger
    arena than joining a group that must grow more, and measured on random request sets it
    saves a few percent over ``LIFO``) or ``LIFO`` (PyTorch's size-blind choice, for
    comparison). Under ``BEST_FIT`` tensors starting at the same step go largest first, so
    large tensors get the large free groups. The plan's algorithm is ``"storage_groups"``, or
    ``"storage_groups_lifo"`` for ``LIFO``.
    """
    reqs = _checked(requests, alignment)
    sizes = [align(r.size, alignment) for r in reqs]
    if policy is GroupPolicy.BEST_FIT:
        order = sorted(range(len(reqs)), key=lambda i: (reqs[i].start, -sizes[i], i))
    else:
        order = sorted(range(len(reqs)), key=lambda i: (reqs[i].start, i))

    group_sizes: list[int] = []
    group_of = [0] * len(reqs)
    free: list[int] = []  # groups whose latest member has ended, in the order they were freed
    ending: list[tuple[int, int, int]] = []  # (end step, visit number, group) of latest members
    for visit, i in enumerate(order):
        r = reqs[i]
        while ending and ending[0][0] < r.start:
            free.append(heapq.heappop(ending)[2])
        if not free:
            group = len(group_sizes)
            group_sizes.append(0)
        elif policy is GroupPolicy.LIFO:
            group = free.pop()
        else:
            group = min(free, key=lambda g: (max(0, sizes[i] - group_sizes[g]), group_sizes[g], g))
            free.remove(group)
        group_of[i] = group
        group_sizes[group] = max(group_sizes[group], sizes[i])
        heapq.heappush(ending, (r.end, visit, group))

    group_offsets: list[int] = []
    total = 0
    for size in group_sizes:
        group_offsets.append(total)
        total += size
    placements = tuple(Placement(r, group_offsets[group_of[i]], group_of[i])
                       for i, r in enumerate(reqs))
    algorithm = "storage_groups" if policy is GroupPolicy.BEST_FIT else "storage_groups_lifo"
    return MemoryPlan(placements, total, lower_bound(reqs, alignment), algorithm, alignment)


# -- greedy by size ----------------------------------------------------------------------------


def plan_greedy_by_size(requests: Sequence[TensorRequest],
                        alignment: int = DEFAULT_ALIGNMENT) -> MemoryPlan:
    """Offsets by "greedy by size for offset calculation": Y. Pisarchyk and J. Lee, "Efficient
    Memory Management for Deep Neural Net Inference", arXiv:2001.03288, §5 (the strategy
    PyTorch's Static Runtime cites, and TFLite's GPU delegate implements).

    Tensors are placed largest (aligned) size first; ties go to the longer lifetime, then to
    the earlier start, then to the name, so the plan does not depend on the order of
    ``requests``. The earlier start matters when many tensors have one size (a chain of equal
    activations): placed in execution order they alternate between two slots, while placed in
    name order ("s1", "s10", "s2", ...) they can need a third. Each tensor looks at
    the already placed tensors whose lifetimes overlap its own, in order of offset, and takes
    the smallest gap between them that fits it (the lowest such gap on a tie); if none fits,
    it goes right after the highest of them. Offsets stay multiples of the alignment because
    every gap boundary is an offset plus an aligned size.
    """
    return _greedy(requests, alignment, "greedy_by_size",
                   lambda r, size: (-size, -(r.end - r.start), r.start, r.name))


def plan_greedy_by_lifetime(requests: Sequence[TensorRequest],
                            alignment: int = DEFAULT_ALIGNMENT) -> MemoryPlan:
    """``plan_greedy_by_size``'s placement with the longest-lived tensors placed first (then
    the larger, the earlier, by name). Where a few long-lived tensors span a chain of shorter
    ones — a DCN-v2's cross layers read their input ``x0`` all along — placing them first
    keeps them out of the way: the chain then alternates in the room above them, where
    largest-first put a large short-lived tensor low and pushed a long-lived one above it
    (``dcn_v2`` at batch 64: 1.10 × the lower bound by size, the bound by lifetime)."""
    return _greedy(requests, alignment, "greedy_by_lifetime",
                   lambda r, size: (-(r.end - r.start), -size, r.start, r.name))


def _greedy(requests: Sequence[TensorRequest], alignment: int, algorithm: str,
            key) -> MemoryPlan:
    """Each tensor, in ``key`` order, at the smallest fitting gap among the placed tensors
    whose lifetimes overlap its own (``plan_greedy_by_size``)."""
    reqs = _checked(requests, alignment)
    sizes = [align(r.size, alignment) for r in reqs]
    order = sorted(range(len(reqs)), key=lambda i: key(reqs[i], sizes[i]))

    offsets = [0] * len(reqs)
    placed: list[tuple[int, int]] = []  # (offset, request index), kept sorted by offset
    arena = 0
    for i in order:
        r, size = reqs[i], sizes[i]
        best_gap: int | None = None
        best_offset: int | None = None
        prev_top = 0  # highest byte used so far by overlapping tensors below the current one
        for offset, j in placed:
            if not r.overlaps(reqs[j]):
                continue
            gap = offset - prev_top
            if size <= gap and (best_gap is None or gap < best_gap):
                best_gap, best_offset = gap, prev_top
            prev_top = max(prev_top, offset + sizes[j])
        offsets[i] = prev_top if best_offset is None else best_offset
        bisect.insort(placed, (offsets[i], i))
        arena = max(arena, offsets[i] + size)

    placements = tuple(Placement(r, offsets[i], None) for i, r in enumerate(reqs))
    return MemoryPlan(placements, arena, lower_bound(reqs, alignment), algorithm, alignment)


def plan_best(requests: Sequence[TensorRequest], alignment: int = DEFAULT_ALIGNMENT) -> MemoryPlan:
    """Whichever of ``plan_greedy_by_size``, ``plan_greedy_by_lifetime`` and
    ``plan_storage_groups`` has the smallest arena, the first of them on a tie. (Over the
    zoo's 63 plans, by lifetime was the smallest on three — ``dcn_v2``'s, at the lower bound
    where the other two were 1.09–1.10 × it; it costs ~0.9 ms more on the largest plan, T5's
    142 tensors.)"""
    reqs = list(requests)
    return min((plan_greedy_by_size(reqs, alignment), plan_greedy_by_lifetime(reqs, alignment),
                plan_storage_groups(reqs, alignment)), key=lambda p: p.arena_bytes)
