"""The reference executor: runs processed nodes in order over a value array.

It is the executor every other one is checked against: straightforward, general, and
exactly right. Control flow (``prim::If``, ``prim::Loop``) runs sub-blocks over the same
array; a ``prim::fork`` block runs on a launcher thread over a value array of its own
(``runtime/futures.py``). One ``Interpreter`` per runtime: it owns the value array and is not
thread-safe.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import partial
from typing import Any

import torch

from static_runtime.memory.arena import (
    ArenaLayout,
    Regions,
    allocate_arena,
    build_layout,
    contiguous_strides,
    materialize,
    observe,
    owning_view,
    shared_unexpectedly,
)
from static_runtime.memory.cache import LayoutCache, signature, structure
from static_runtime.memory.lifetimes import Lifetimes
from static_runtime.memory.planner import DEFAULT_ALIGNMENT
from static_runtime.ops.registry import may_hand_back
from static_runtime.runtime.checks import OutVariantChecks
from static_runtime.runtime.futures import fork
from static_runtime.runtime.plan import (
    Control,
    ExecutionPlan,
    ProcessedBlock,
    ProcessedNode,
    copy_containers,
)
from static_runtime.runtime.symbolic import ShapeProgram, ShapePrograms

#: how many layouts' tensors one runtime keeps (``Interpreter.install``): ~1 KB of
#: metadata per tensor
_MAX_LAYOUT_TENSORS = 256


def annotate(e: BaseException, pn: ProcessedNode) -> None:
    """Add a note naming the node (kind and source line) to an exception raised inside it."""
    note = f"static_runtime: while running {pn.where()}"
    if note not in getattr(e, "__notes__", ()):
        e.__notes__ = [*getattr(e, "__notes__", ()), note]  # add_note is Python 3.11+


@dataclass(frozen=True)
class MemoryConfig:
    """What a module shares with its runtimes for managed memory."""

    lifetimes: Lifetimes
    layouts: LayoutCache
    planner: str
    verify: bool
    #: out variants checked before the arena path serves them (None: trusted)
    checks: OutVariantChecks | None = None
    #: signature structures (``memory.cache.structure``) a reference recording call has
    #: run: a new size of one of them may record through generated code
    structures: set = field(default_factory=set)
    #: per structure, the layout of the sizes recorded last: its regions hold every size of
    #: that structure seen so far, so a new size that fits is laid out without planning
    largest: dict = field(default_factory=dict)
    #: per structure, the shape programs that lay out a new size without a recording call
    #: (``runtime/symbolic.py``; None: off)
    programs: ShapePrograms | None = None
    #: the graph's input names (for the programs' descriptions)
    input_names: tuple[str, ...] = ()
    #: signatures recorded while no program covered them (the first program of a process
    #: takes a second or so): laid out again by their structure's program on a later call,
    #: so that they run the code made for the program's layouts (``_relay``)
    unprogrammed: set = field(default_factory=set)
    #: managed slot → the slots the alias analysis says may alias it (``Lifetimes.aliases``)
    may_alias: dict = field(default_factory=dict)
    #: managed slots a recording found sharing storage with a value the analysis did not
    #: expect (``arena.shared_unexpectedly``): allocated each call, never in the arena
    shared: set = field(default_factory=set)


class Interpreter:
    def __init__(self, plan: ExecutionPlan, memory: MemoryConfig | None = None):
        self.plan = plan
        self.memory = memory
        self.values: list[Any] = [None] * plan.n_slots
        for slot, value in plan.constants.items():
            self.values[slot] = value
        #: managed slots not in the arena for the current layout: cleared after each call
        self.unkept: set[int] = set()
        #: this call's values an out variant handed back in place of its arena tensor
        #: (``registry.hands_back``): (slot, the arena tensor), put back by ``clear``
        self._handed: list[tuple[int, torch.Tensor]] = []
        self.layout: ArenaLayout | None = None
        self.arena: torch.Tensor | None = None
        #: managed outputs (``manage_output_tensors``): their arena, and how many references
        #: to its storage this runtime holds itself (more means the caller still holds some)
        self.output_arena: torch.Tensor | None = None
        self._output_baseline = 0
        self.outputs_released = True
        self._key: tuple | None = None
        self._recording = False
        #: whether the recording call under way checked every out variant it reached (the
        #: reference interpreter does; generated code only looks afterwards)
        self._record_checked = True
        #: this call is the first real one of a layout planned without a recording run:
        #: out variants are checked as it goes (``runtime/checks.py``)
        self._verifying = False
        self._checks = memory.checks if memory is not None else None
        self._managed = plan.managed_slots + plan.output_slots
        #: the program that laid out the current layout, until its first call confirmed it
        self._confirm: ShapeProgram | None = None
        #: the signature whose first call a program's code ran already (counted then as one
        #: of the sizes it served: ``ShapePrograms.served``), now being laid out
        self.counted: tuple | None = None
        #: id of a layout → (layout, its tensors over this runtime's arena), the most recent
        #: ``_MAX_LAYOUT_TENSORS`` (cleared when the arena is made anew)
        self._layout_tensors: dict[int, tuple[ArenaLayout, dict[int, torch.Tensor]]] = {}
        #: the arena's region tensors, which every layout's tensors are views of
        #: (``memory.arena.materialize``; cleared with the arena)
        self._regions: Regions = {}

    # -- one call
    def run(self, inputs: list[Any]) -> list[Any]:
        self.begin(inputs)
        try:
            self.run_block(self.plan.block)
            return self.end(inputs)
        finally:
            self.clear()

    def begin(self, inputs: list[Any]) -> None:
        """Put the inputs in their slots, and the managed memory for their signature."""
        self.prepare(inputs)
        values = self.values
        for slot, x in zip(self.plan.block.inputs, inputs):
            values[slot] = x

    def prepare(self, inputs: list[Any]) -> None:
        """Make the managed memory for ``inputs``' signature current (or start recording)."""
        if self.memory is not None and self._managed:
            if self.output_arena is not None and not self.outputs_released:
                self._check_outputs_dropped()
            key = signature(inputs)
            if key != self._key:
                self._switch(key, inputs)

    def end(self, inputs: list[Any]) -> list[Any]:
        """The call's outputs (after planning memory, if this call was a recording)."""
        return self.finish([self.values[s] for s in self.plan.block.outputs], inputs)

    def finish(self, outputs: list[Any], inputs: list[Any]) -> list[Any]:
        """Outputs as the caller gets them: containers copied, managed outputs handed out;
        plans the arena if this call was a recording."""
        plan = self.plan
        for i in plan.copied_outputs:
            outputs[i] = copy_containers(outputs[i])
        if self._verifying:
            self._checks.mark_checked(self.layout)
            self._verifying = False
            if self.layout.program is None and self._key is not None:
                self._planned(inputs)  # (a recording that left checks to this call)
        if self._confirm is not None:
            self._confirm_program()
        if self._recording:
            self._finish_recording(inputs)
        elif self.layout is not None and self.layout.outputs:
            outputs = self._hand_out(outputs)
        return outputs

    # -- managed outputs
    def _hand_out(self, outputs: list[Any]) -> list[Any]:
        """Replace the output arena's working tensors by owning views of the same bytes.

        The working tensors cannot grow past their region (safe writes) but do not own
        their memory; what the caller gets is a slice of the output arena, which keeps it
        alive and lets ``_check_outputs_dropped`` count the caller's references."""
        values, arena = self.values, self.output_arena
        swap = {}
        for spec in self.layout.outputs:
            work = values[spec.slot]
            if work is not None and spec.slot not in self.unkept:
                swap[id(work)] = owning_view(arena, spec)
        if not swap:
            return outputs
        self.outputs_released = False
        # (A module-level helper, not a recursive closure: the closure's reference cycle
        # would keep the views alive until the garbage collector ran.)
        return [_substitute(x, swap) for x in outputs]

    def _check_outputs_dropped(self) -> None:
        if _storage_use_count(self.output_arena) > self._output_baseline:
            raise RuntimeError(
                "the outputs of the previous call are still referenced: with "
                "manage_output_tensors=True they live in a buffer the next call overwrites. "
                "Drop them (and any views of them), or call release_outputs() to let the "
                "next call overwrite them.")
        self.outputs_released = True

    def release_outputs(self) -> None:
        """Let the next call overwrite the previous call's managed outputs."""
        self.outputs_released = True

    def clear(self) -> None:
        """Drop every value but constants and arena tensors."""
        values = self.values
        for s in self.plan.transient_slots:
            values[s] = None
        for s in self.unkept:
            values[s] = None
        if self._handed:
            for s, arena_tensor in self._handed:
                values[s] = arena_tensor
            self._handed.clear()

    # -- managed memory
    def _switch(self, key: tuple, inputs: list[Any]) -> None:
        self._key = key
        memory = self.memory
        layout = memory.layouts.get(key)
        if layout is not None:
            if layout.program is None and key in memory.unprogrammed and self._relay(key, inputs):
                return
            self.install(layout)
            self._verifying = self._checks is not None and not self._checks.layout_checked(
                layout)
            return
        if memory.programs is not None and self._lay_out(key, inputs):
            return
        # A signature never seen: this call allocates, and its sizes make the plan.
        self._recording = True
        self._verifying = False
        self.layout = None
        for s in self._managed:
            self.values[s] = None
        self.unkept = set(self._managed)

    def _lay_out(self, key: tuple, inputs: list[Any]) -> bool:
        """Lay out a new size with a shape program of its structure, if one covers it."""
        memory = self.memory
        shape_free = structure(key)
        base = memory.largest.get(shape_free)
        if base is None:
            return False
        for program in memory.programs.get(shape_free):
            layout = program.layout(inputs, base, memory.lifetimes, self.plan.slot_of,
                                    memory.planner)
            if layout is not None:
                memory.largest[shape_free] = layout
                if memory.verify:
                    layout.plan.verify()
                memory.layouts.put(key, layout)
                self.install(layout)
                self._verifying = False
                self._confirm = program
                if key != self.counted:
                    memory.programs.note_served(program)
                return True
        return False

    def _relay(self, key: tuple, inputs: list[Any]) -> bool:
        """A signature recorded before its structure had a program: lay it out again with
        the program, once there is one (then it runs the program's code, made ahead)."""
        memory = self.memory
        shape_free = structure(key)
        if memory.programs.get(shape_free) and self._lay_out(key, inputs):
            memory.unprogrammed.discard(key)
            return True
        if memory.programs.settled(shape_free):
            # none that covers it is coming (a program for a batch of one can be ready
            # while the one for the other sizes is still being made): stop asking
            memory.unprogrammed.discard(key)
        return False

    def _forget_unprogrammed(self) -> None:
        """Drop the waiting signatures of structures that have no program and none coming
        (it could not be made): a model no program can follow records every size, and
        would keep each of them here. (On a recording call: never in the steady state.)"""
        memory = self.memory
        programs = memory.programs
        for key in list(memory.unprogrammed):
            shape_free = structure(key)
            if not programs.get(shape_free) and programs.settled(shape_free):
                memory.unprogrammed.discard(key)

    def _confirm_program(self) -> None:
        """After the first call from a layout a shape program made: every arena tensor has
        the shape the program said (an out variant resizes one that differs). If not, the
        program is retired and the layout dropped: this call's results are right either
        way, the next call of this size records."""
        program, self._confirm = self._confirm, None
        values, unkept, layout = self.values, self.unkept, self.layout
        for spec in (*layout.specs, *layout.outputs):
            t = values[spec.slot]
            if spec.slot not in unkept and t is not None and tuple(t.shape) != spec.shape:
                shape_free = structure(self._key)
                self.memory.programs.retire(
                    shape_free, program, f"{spec.name} came out "
                    f"{list(t.shape)}, the program said {list(spec.shape)}")
                self.memory.layouts.discard(self._key)
                self.memory.largest.pop(shape_free, None)
                self._key = None  # the next call switches again
                return

    def _finish_recording(self, inputs: list[Any]) -> None:
        checked = self._record_checked
        layout = self.record_layout(inputs, checked=checked)
        self.install(layout)
        if checked:
            self._planned(inputs)
        else:
            self._verifying = True  # its first call from the arena checks the out variants

    def _planned(self, inputs: list[Any]) -> None:
        """The current signature's sizes were recorded and every out variant it reaches is
        checked (by the recording call, or by its first call from the arena): its structure
        may record through generated code from now on, and a shape program is made from
        these sizes if none covers them."""
        memory = self.memory
        shape_free = structure(self._key)
        memory.structures.add(shape_free)
        if memory.programs is not None:
            memory.programs.schedule(shape_free, self.plan, inputs, self._checks,
                                     list(memory.input_names))
            memory.unprogrammed.add(self._key)
            self._forget_unprogrammed()

    def record_layout(self, inputs: list[Any], *, checked: bool = True) -> ArenaLayout:
        """Plan the arena from the values a recording call left, and cache the layout.
        ``checked``: the call checked the out variants of the nodes it ran (a real call)."""
        memory, values = self.memory, self.values
        refused = self._checks.refused_slots if self._checks is not None else frozenset()
        memory.shared.update(shared_unexpectedly(values, self._managed, memory.may_alias))
        observed = {}
        for s in self._managed:
            if s in refused or s in memory.shared:
                continue  # allocated each call
            obs = observe(values[s], inputs)
            if obs is not None:
                observed[s] = obs
        managed = set(self._managed)
        seen: set[int] = set()
        unplanned = 0
        for s in self.plan.transient_slots:
            x = values[s]
            if (isinstance(x, torch.Tensor) and s not in managed and x.device.type == "cpu"
                    and x.layout == torch.strided):  # a sparse tensor has no one storage
                storage = x.untyped_storage()
                if storage.data_ptr() not in seen:
                    seen.add(storage.data_ptr())
                    unplanned += storage.nbytes()
        shape_free = structure(self._key) if self._key is not None else None
        layout = build_layout(memory.lifetimes, self.plan.slot_of, observed,
                              planner=memory.planner, unplanned_bytes=unplanned,
                              checked=checked, base=memory.largest.get(shape_free))
        if shape_free is not None:
            memory.largest[shape_free] = layout
        if memory.verify:
            layout.plan.verify()
        memory.layouts.put(self._key, layout)
        return layout

    def install(self, layout: ArenaLayout) -> bool:
        """Make ``layout`` current: managed slots hold tensors over this runtime's arena.
        Whether they are the tensors this runtime made for ``layout`` before (over the same
        arena): code bound to them then still serves."""
        refused = self._checks.refused_slots if self._checks is not None else frozenset()
        if self.arena is None or self.arena.numel() < layout.arena_bytes + DEFAULT_ALIGNMENT:
            self.arena = allocate_arena(layout.arena_bytes)
            self._layout_tensors.clear()
            self._regions.clear()
        held = self._layout_tensors.get(id(layout))
        if held is not None and held[0] is layout:
            # Traffic of every size switches layouts on almost every call: a layout's
            # tensors are made once per runtime, not per switch.
            tensors, reused = held[1], True
        else:
            tensors, reused = materialize(layout.specs, self.arena, self._regions), False
            if layout.outputs:
                if (self.output_arena is None
                        or self.output_arena.numel() < layout.output_bytes + DEFAULT_ALIGNMENT):
                    if self.output_arena is not None and not self.outputs_released:
                        self._check_outputs_dropped()
                    self.output_arena = allocate_arena(layout.output_bytes)
                    self._output_baseline = _storage_use_count(self.output_arena)
                tensors.update(materialize(layout.outputs, self.output_arena))
            else:
                cache = self._layout_tensors
                if len(cache) >= _MAX_LAYOUT_TENSORS:
                    del cache[next(iter(cache))]
                cache[id(layout)] = (layout, tensors)
        values = self.values
        for s in self._managed:
            values[s] = tensors.get(s) if s not in refused else None
        self.unkept = set(layout.unmanaged) | refused
        self.layout = layout
        self._recording = False
        return reused

    def refused_write(self, slot: int, tensor: Any) -> None:
        """PyTorch refused to grow the arena tensor of ``slot`` past its region: the value is
        allocated from now on for this layout. PyTorch sets the tensor's new sizes before it
        finds its storage cannot grow, so they are set back to the layout's here: the tensor
        stays this runtime's for the layout (and its region's neighbours), and a later write
        of those sizes would go past its region into freed or foreign memory."""
        self.unkept.add(slot)
        layout = self.layout
        if layout is None or not isinstance(tensor, torch.Tensor):
            return
        for spec in (*layout.specs, *layout.outputs):
            if spec.slot == slot:
                tensor.set_(tensor.untyped_storage(), 0, spec.shape,
                            spec.strides or contiguous_strides(spec.shape))
                return

    # -- blocks and nodes
    def run_block(self, block: ProcessedBlock) -> None:
        self.run_nodes(block.nodes)

    def run_nodes(self, nodes: tuple[ProcessedNode, ...]) -> None:
        values = self.values
        for pn in nodes:
            try:
                control = pn.control
                if control is Control.NONE:
                    self._run_node(pn)
                elif control is Control.IF:
                    branch = pn.blocks[0] if values[pn.inputs[0]] else pn.blocks[1]
                    self.run_block(branch)
                    for o, bo in zip(pn.outputs, branch.outputs):
                        values[o] = values[bo]
                elif control is Control.LOOP:
                    self._run_loop(pn)
                else:
                    body = pn.blocks[0]
                    values[pn.outputs[0]] = fork(partial(run_forked, self.plan, body),
                                                 *[values[i] for i in pn.inputs])
            except BaseException as e:
                annotate(e, pn)
                raise

    def _run_node(self, pn: ProcessedNode) -> None:
        values = self.values
        args = [values[i] for i in pn.inputs]
        if pn.managed:
            out = values[pn.outputs[0]]
            if out is None:
                # Recording, or not in the arena for this signature: allocate.
                if self._recording and self._checks is not None:
                    values[pn.outputs[0]] = self._checks.recorded(pn, args)
                else:
                    values[pn.outputs[0]] = pn.fn(*args)
                return
            if self._verifying:
                result, in_arena = self._checks.verify(pn, args, out)
                if not in_arena:
                    self.unkept.add(pn.outputs[0])
                elif result is not out:  # (handed back: the arena tensor is put back after)
                    self._handed.append((pn.outputs[0], out))
                values[pn.outputs[0]] = result
                return
            try:
                result = pn.out_fn(out, *args)
            except RuntimeError as e:
                if not _is_refused_resize(e):
                    raise
                # A data-dependent size outgrew its planned region: PyTorch refused to
                # resize the arena tensor. Allocate instead, now and for this layout.
                self.refused_write(pn.outputs[0], out)
                values[pn.outputs[0]] = pn.fn(*args)
            else:
                if result is not out and may_hand_back(pn.out_fn):
                    self._handed.append((pn.outputs[0], out))
                    values[pn.outputs[0]] = result
            return
        result = pn.fn(*args)
        n = len(pn.outputs)
        if n == 1:
            values[pn.outputs[0]] = result
        elif n:
            if len(result) != n:
                raise ValueError(
                    f"{pn.kind} produced {len(result)} values, the graph expects {n}")
            for slot, x in zip(pn.outputs, result):
                values[slot] = x

    def _run_loop(self, pn: ProcessedNode) -> None:
        values = self.values
        max_trip = values[pn.inputs[0]]
        cond = values[pn.inputs[1]]
        carried = [values[i] for i in pn.inputs[2:]]
        body = pn.blocks[0]
        it_slot, carried_slots = body.inputs[0], body.inputs[1:]
        cond_slot, out_slots = body.outputs[0], body.outputs[1:]
        i = 0
        while cond and i < max_trip:
            values[it_slot] = i
            for s, x in zip(carried_slots, carried):
                values[s] = x
            self.run_block(body)
            cond = values[cond_slot]
            carried = [values[s] for s in out_slots]
            i += 1
        for o, x in zip(pn.outputs, carried):
            values[o] = x


def run_forked(plan: ExecutionPlan, block: ProcessedBlock, *args: Any) -> Any:
    """Run a fork's block over a value array of its own (no arena: nothing in a forked block
    is managed); its one output."""
    interp = Interpreter(plan)
    values = interp.values
    for slot, x in zip(block.inputs, args):
        values[slot] = x
    interp.run_block(block)
    return values[block.outputs[0]]


def _substitute(x: Any, swap: dict[int, torch.Tensor]) -> Any:
    if isinstance(x, torch.Tensor):
        return swap.get(id(x), x)
    if isinstance(x, tuple):
        return tuple(_substitute(e, swap) for e in x)
    return x


def _storage_use_count(t: torch.Tensor) -> int:
    """References to ``t``'s storage (tensors and views over it), PyTorch's own count."""
    return torch._C._storage_Use_Count(t.untyped_storage()._cdata)


def _is_refused_resize(e: BaseException) -> bool:
    return "not resizable" in str(e)
