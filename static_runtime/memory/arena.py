"""The arena: one buffer per runtime, and a tensor per managed value carved out of it.

An ``ArenaLayout`` is what one input signature needs: each managed value's dtype, shape and
byte offset (from a ``MemoryPlan``), plus the managed values that turned out not to fit the
scheme for that signature (see ``build_layout``). Layouts are immutable and shared by all
runtimes of a module; each runtime materialises a layout into tensors over its own arena.

Each managed tensor gets a storage of its own that points into the arena and cannot grow:
should an operator ever need a bigger output than planned (a data-dependent shape), PyTorch
refuses to resize it ("Trying to resize storage that is not resizable") rather than writing
past the tensor's region into a neighbour's. The runtime catches that and falls back to an
allocating call for that value.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import torch

from static_runtime.memory.lifetimes import Lifetimes
from static_runtime.memory.planner import (
    DEFAULT_ALIGNMENT,
    MemoryPlan,
    TensorRequest,
    align,
    plan_best,
    plan_greedy_by_lifetime,
    plan_greedy_by_size,
    plan_storage_groups,
)

PLANNERS: dict[str, Callable[[Sequence[TensorRequest], int], MemoryPlan]] = {
    "best": plan_best,
    "greedy_by_size": plan_greedy_by_size,
    "greedy_by_lifetime": plan_greedy_by_lifetime,
    "storage_groups": plan_storage_groups,
}


class TensorSpec(NamedTuple):
    """Where one managed value lives for one signature, and as what. (A named tuple: a
    shape program makes one per value for each new size, on the request path.)"""

    slot: int
    name: str
    dtype: torch.dtype
    shape: tuple[int, ...]
    offset: int
    nbytes: int
    #: the recording run's strides: row-major, or channels-last for 4-D tensors that came
    #: out that way (oneDNN convolutions, and element-wise operators fed by them)
    strides: tuple[int, ...] | None = None
    #: the bytes the plan reserved for this value (``nbytes`` or more: a region planned for
    #: a larger size of the same structure; 0: ``nbytes``)
    reserved: int = 0

    @property
    def region(self) -> int:
        return max(self.reserved, self.nbytes)


@dataclass(frozen=True)
class ArenaLayout:
    """Where each managed value lives for one input signature."""

    plan: MemoryPlan
    specs: tuple[TensorSpec, ...]
    #: managed slots not placed in the arena for this signature (allocated each call)
    unmanaged: frozenset[int]
    #: managed outputs, laid end to end in the output arena (they outlive the call)
    outputs: tuple[TensorSpec, ...] = ()
    output_bytes: int = 0
    #: planned from a run on real data, whose out variants were checked as it went
    #: (``runtime/checks.py``); False for a layout planned on meta tensors
    checked: bool = True
    #: what laid it out, if not a recording call (a shape program: ``runtime/symbolic.py``)
    program: Any = field(default=None, compare=False)

    @property
    def arena_bytes(self) -> int:
        return self.plan.arena_bytes


@dataclass(frozen=True)
class Observation:
    """What one managed value was in a recording run."""

    dtype: torch.dtype
    shape: tuple[int, ...]
    #: whether it can live in the arena: a dense tensor of its own storage, row-major or
    #: channels-last
    fits: bool
    #: its strides if it fits channels-last but not row-major (None: row-major)
    strides: tuple[int, ...] | None = None


def observe(value: Any, inputs: Sequence[Any]) -> Observation | None:
    """Record a managed value produced by an allocating run (None: it was never produced,
    e.g. its node sits after an early exit — it then stays allocating)."""
    if not isinstance(value, torch.Tensor):
        return None
    if value.layout != torch.strided:  # sparse, ...: no storage of its own to place
        return Observation(value.dtype, tuple(value.shape), False, None)
    row_major = value.is_contiguous()
    dense = row_major or (
        value.dim() == 4 and value.is_contiguous(memory_format=torch.channels_last))
    fits = dense and not _aliases_any(value, inputs)
    return Observation(value.dtype, tuple(value.shape), fits,
                       None if row_major else tuple(value.stride()))


def shared_unexpectedly(values: Sequence[Any], managed: Sequence[int],
                        may_alias: Mapping[int, frozenset[int]]) -> set[int]:
    """The managed slots whose tensor's storage another slot of ``values`` (a recording
    call's values, every one still held) shares although ``may_alias[slot]`` — the slots the
    alias analysis says may alias it — does not name it. The analysis follows operators'
    schemas; an operator that hands back an input although its schema says its result is
    fresh (``passes.alias.rules.RETURNS_INPUT`` lists those known) would have the planner
    give the value's region to another while the alias is still read: such a value is kept
    out of the arena instead (allocated each call). On a recording call only."""
    owners: dict[int, list[int]] = {}
    for s in managed:
        t = values[s]
        if isinstance(t, torch.Tensor) and t.layout == torch.strided and not t.is_meta:
            ptr = t.untyped_storage().data_ptr()
            if ptr:
                owners.setdefault(ptr, []).append(s)
    flagged: set[int] = set()
    if not owners:
        return flagged
    for u, x in enumerate(values):
        if not isinstance(x, torch.Tensor) or x.layout != torch.strided or x.is_meta:
            continue
        for s in owners.get(x.untyped_storage().data_ptr(), ()):
            if u != s and u not in may_alias.get(s, ()):
                flagged.add(s)
    return flagged


def _aliases_any(t: torch.Tensor, others: Sequence[Any]) -> bool:
    if t.device.type == "meta":
        # No storage to compare: an op handing back its input is caught by identity.
        return any(t is o or t._base is o for o in others)
    ptr = t.untyped_storage().data_ptr()
    return ptr == 0 or any(
        isinstance(o, torch.Tensor) and o.device.type != "meta"
        and o.untyped_storage().data_ptr() == ptr for o in others)


def build_layout(lifetimes: Lifetimes, slot_of: dict, observed: dict[int, Observation],
                 *, planner: str = "best", alignment: int = DEFAULT_ALIGNMENT,
                 unplanned_bytes: int = 0, checked: bool = True,
                 base: ArenaLayout | None = None) -> ArenaLayout:
    """Plan the arena for the values observed in one recording run.

    ``base``: a layout of the same structure (another size). Each managed value's region in
    a plan holds its bytes for all the time it lives, so a value of this size that fits in
    the region ``base`` planned for it can live there too: if every value does, ``base``'s
    offsets are kept and no planner runs. Otherwise the planner runs on each value's larger
    size, this one's or ``base``'s, so the arena grows to hold every size seen so far (as
    the seed's storage groups grow) and the sizes before this one keep fitting."""
    requests: list[TensorRequest] = []
    names: dict[str, int] = {}
    unmanaged: set[int] = set()
    dims: dict[int, tuple[torch.dtype, tuple[int, ...]]] = {}
    sizes: dict[int, int] = {}
    for lt in lifetimes.managed:
        slot = slot_of[lt.value]
        obs = observed.get(slot)
        if obs is None or not obs.fits:
            unmanaged.add(slot)
            continue
        nbytes = math.prod(obs.shape) * obs.dtype.itemsize
        name = lt.value.name
        requests.append(TensorRequest(name, nbytes, lt.start, lt.end))
        names[name] = slot
        dims[slot] = (obs.dtype, obs.shape, obs.strides)
        sizes[slot] = nbytes
    regions = {spec.slot: spec for spec in base.specs} if base is not None else {}
    if regions and all(slot in regions and nbytes <= regions[slot].region
                       for slot, nbytes in sizes.items()):
        plan = base.plan if base.plan.unplanned_bytes == unplanned_bytes else \
            dataclasses.replace(base.plan, unplanned_bytes=unplanned_bytes)
        specs = tuple(
            TensorSpec(slot, regions[slot].name, *dims[slot][:2], regions[slot].offset,
                       sizes[slot], dims[slot][2], regions[slot].region)
            for slot in sizes)
    else:
        if regions:
            requests = [dataclasses.replace(r, size=max(r.size, regions[names[r.name]].region))
                        if names[r.name] in regions else r for r in requests]
        plan = PLANNERS[planner](requests, alignment)
        plan = dataclasses.replace(plan, unplanned_bytes=unplanned_bytes)
        specs = tuple(
            TensorSpec(names[p.request.name], p.request.name, *dims[names[p.request.name]][:2],
                       p.offset, sizes[names[p.request.name]], dims[names[p.request.name]][2],
                       p.request.size)
            for p in plan.placements)
    outputs, offset = [], 0
    for v in lifetimes.outputs:
        slot = slot_of[v]
        obs = observed.get(slot)
        # Outputs are handed out as slices of the output arena: row-major only.
        if obs is None or not obs.fits or obs.strides is not None:
            unmanaged.add(slot)
            continue
        nbytes = math.prod(obs.shape) * obs.dtype.itemsize
        outputs.append(TensorSpec(slot, v.name, obs.dtype, obs.shape, offset, nbytes))
        offset += align(nbytes, alignment)
    return ArenaLayout(plan, specs, frozenset(unmanaged), tuple(outputs), offset, checked)


def refit(base: ArenaLayout, index: Mapping[int, int], dtypes: Sequence[torch.dtype],
          sizes: Sequence[tuple[tuple[int, ...], tuple[int, ...] | None]],
          program: Any = None) -> ArenaLayout | None:
    """``base`` with each managed value's dtype, shape and strides replaced (slot ``s``
    becomes a ``dtypes[index[s]]`` tensor of ``sizes[index[s]] = (shape, strides or None for
    row-major)``; every value ``base`` places must be among them, arena and outputs), if
    every value fits the region ``base`` reserved for it; else None. The plan is ``base``'s
    own: the same offsets and arena size, no planner run; ``program`` is what laid it out.
    (On the request path for every new size: one pass, no intermediate containers.)"""
    specs = []
    prod = math.prod
    get = index.get
    append = specs.append
    make = tuple.__new__  # (a named tuple's own __new__ is Python code: 3x the time)
    for slot, name, _, _, offset, was, _, reserved in base.specs:
        i = get(slot)
        if i is None:
            return None
        dtype = dtypes[i]
        shape, strides = sizes[i]
        nbytes = prod(shape) * dtype.itemsize
        region = max(was, reserved)
        if nbytes > region:
            return None
        append(make(TensorSpec, (slot, name, dtype, shape, offset, nbytes, strides, region)))
    outputs, offset = [], 0
    for spec in base.outputs:
        i = index.get(spec.slot)
        if i is None or sizes[i][1] is not None:
            return None
        dtype = dtypes[i]
        shape = sizes[i][0]
        nbytes = prod(shape) * dtype.itemsize
        outputs.append(TensorSpec(spec.slot, spec.name, dtype, shape, offset, nbytes))
        offset += align(nbytes, DEFAULT_ALIGNMENT)
    return ArenaLayout(base.plan, tuple(specs), base.unmanaged, tuple(outputs), offset, True,
                       program)


def fits(base: ArenaLayout, index: Mapping[int, int], dtypes: Sequence[torch.dtype],
         sizes: Sequence[tuple[tuple[int, ...], tuple[int, ...] | None]]) -> bool:
    """Whether every value ``base`` places in the arena fits the region it reserved for it
    at the sizes ``refit`` takes (and would keep ``base``'s plan)."""
    prod = math.prod
    for spec in base.specs:
        i = index.get(spec.slot)
        if i is None or prod(sizes[i][0]) * dtypes[i].itemsize > spec.region:
            return False
    return True


def allocate_arena(nbytes: int) -> torch.Tensor:
    """The arena buffer, with room to align its start to the planning alignment."""
    return torch.empty(nbytes + DEFAULT_ALIGNMENT, dtype=torch.uint8)


def aligned_start(arena: torch.Tensor) -> int:
    """Byte offset of the first aligned address in ``arena``."""
    return (-arena.data_ptr()) % DEFAULT_ALIGNMENT


#: (offset, region bytes, dtype) → a 1-D tensor over that region of an arena (``materialize``)
Regions = dict[tuple[int, int, torch.dtype], torch.Tensor]


def materialize(specs: Sequence[TensorSpec], arena: torch.Tensor,
                regions: Regions | None = None) -> dict[int, torch.Tensor]:
    """One tensor per spec, over ``arena`` (which must outlive them: the tensors do not own
    their memory). Each tensor's storage is the value's whole region: an operator may
    resize it within the region, never past it.

    ``regions``: the region tensors made over this arena before (filled in here). The
    layouts of one structure place their values in the same regions, so a new size's
    tensors are views of these (one ``as_strided`` each) rather than new storages; the
    caller drops them when the arena goes."""
    start = aligned_start(arena)
    limit = arena.numel() - start
    base = arena.data_ptr() + start
    if regions is None:
        regions = {}
    tensors: dict[int, torch.Tensor] = {}
    get = regions.get
    # (On the request path for every new size: the specs unpacked, not read field by field.)
    for slot, _, dtype, shape, offset, nbytes, strides, reserved in specs:
        region = max(nbytes, reserved)
        key = (offset, region, dtype)
        whole = get(key)
        if whole is None:
            if offset + region > limit:
                raise ValueError("arena too small for the layout")
            storage = torch._C._construct_storage_from_data_pointer(base + offset, _CPU, region)
            whole = regions[key] = torch.empty(0, dtype=dtype).set_(
                storage, 0, (region // dtype.itemsize,), (1,))
        if strides is None:
            strides = (shape[1] or 1, 1) if len(shape) == 2 else contiguous_strides(shape)
        tensors[slot] = whole.as_strided(shape, strides)
    return tensors


_CPU = torch.device("cpu")


def contiguous_strides(shape: tuple[int, ...]) -> tuple[int, ...]:
    """Row-major strides of ``shape`` (a dimension of 0 counts as 1, as PyTorch's do)."""
    n = len(shape)
    if n == 2:
        return (shape[1] or 1, 1)
    if n == 3:
        inner = shape[2] or 1
        return (inner * (shape[1] or 1), inner, 1)
    strides, acc = [], 1
    for d in reversed(shape):
        strides.append(acc)
        acc *= max(d, 1)
    return tuple(reversed(strides))


def owning_view(arena: torch.Tensor, spec: TensorSpec) -> torch.Tensor:
    """The bytes of ``spec`` as a tensor that keeps ``arena`` alive (a slice of it)."""
    start = aligned_start(arena) + spec.offset
    return arena[start:start + spec.nbytes].view(spec.dtype).view(spec.shape)
