"""The executor that installs and calls generated code: binds a layout's function to this
runtime's arena tensors (kept per layout), runs the steady state through it, and hands
recording and verifying calls to the reference interpreter or the recording variant."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

from static_runtime.memory.arena import fits
from static_runtime.memory.cache import signature, structure
from static_runtime.runtime.codegen import function
from static_runtime.runtime.codegen.cache import CodeCache, Pending
from static_runtime.runtime.codegen.function import GeneratedCode
from static_runtime.runtime.codegen.prologue import SignatureChanged, guard_kind
from static_runtime.runtime.hoist import HoistRefused
from static_runtime.runtime.interpreter import (
    Interpreter,
    MemoryConfig,
    _is_refused_resize,
    annotate,
)
from static_runtime.runtime.plan import ExecutionPlan, copy_containers

#: the most layouts' bound functions one runtime keeps (``CodegenExecutor._bindings``)
_MAX_BINDINGS = 256


class _Ready(NamedTuple):
    """What a call of a signature this runtime ran before needs (``CodegenExecutor._ready``)."""

    layout: Any
    fast: Callable[..., list[Any]]
    code: GeneratedCode | None
    #: the code checks the signature itself (``SignatureChanged``)
    direct: bool
    pending: Pending | None
    plain_outputs: bool
    unkept: frozenset
    #: the tensor of each managed slot (``_managed``'s order): the value array as ``install``
    #: leaves it (one tuple, not a pair a slot: ~15-70 objects fewer a size for the
    #: collector to promote, ``benchmarks/gc_pauses.py``)
    values: tuple


class CodegenExecutor(Interpreter):
    """Runs calls through generated code; a call that records a new signature's sizes goes
    through the reference interpreter (it needs the value array to observe them)."""

    def __init__(self, plan: ExecutionPlan, memory: MemoryConfig | None, codes: CodeCache):
        super().__init__(plan, memory)
        self.codes = codes
        self._fast: Callable[..., list[Any]] | None = None
        self._code: GeneratedCode | None = None
        self._direct = False
        self._plain_outputs = False
        #: the signature the generic code serves until its own is ready (None: the bound
        #: code is the signature's own)
        self._pending: Pending | None = None
        #: specialising although memory is not planned per signature (so ``prepare`` keeps
        #: no key): the executor keeps the signature itself
        self._own_key = codes.specializer is not None and not (
            memory is not None and self._managed)
        #: id of a layout → (layout, fast, code, direct, plain outputs, pending, unkept):
        #: what ``_bind`` made for it, reused while the layout's tensors are
        self._bindings: dict[int, tuple] = {}
        #: signature → what a call of it needs, for layouts that ran here and need nothing
        #: more (checked, confirmed, no output arena): a change of size among them is a few
        #: attribute writes (``_enter``) instead of ``prepare``'s install and checks
        self._ready: dict[tuple, _Ready] = {}
        self._entered: _Ready | None = None
        #: the entered signature whose tensors the value array does not hold yet
        self._unsynced: _Ready | None = None
        #: a signature's first call may run its shape program's allocating code
        #: (``_run_once``): memory planned, shape programs on, signatures' own code made
        #: only once they are hot
        self._programmed = bool(memory is not None and self._managed
                                and memory.programs is not None and codes.hot is not None)
        #: id of a shape program → its allocating code, bound (``_run_once``)
        self._once: dict[int, Callable[..., list[Any]]] = {}

    def prepare(self, inputs: list[Any]) -> None:
        self._sync()
        super().prepare(inputs)
        if self._own_key:
            key = signature(inputs)
            if key != self._key:
                self._key = key
                self._fast = None

    def install(self, layout) -> bool:
        arena = self.arena
        reused = super().install(layout)
        self._entered = self._unsynced = None
        if self.arena is not arena:
            self._ready.clear()  # their tensors were over the arena made before
        held = self._bindings.get(id(layout))
        if (reused and held is not None and held[0] is layout
                and held[6] == self.unkept):
            # this layout's function, bound before to these very tensors
            _, self._fast, self._code, self._direct, self._plain_outputs, self._pending, _ = held
        else:
            self._fast = None
        return reused

    def run(self, inputs: list[Any]) -> list[Any]:
        fast = self._fast
        if fast is not None and self._direct:
            # Steady state: the generated code checks the signature itself.
            try:
                outputs = fast(*inputs)
            except SignatureChanged:
                pass
            except BaseException as e:
                self._annotate(e)
                raise
            else:
                if self._plain_outputs:
                    return outputs
                return self.finish(outputs, inputs)
        if self._ready:
            # Traffic of every size: a signature this runtime has run before, ready as it was
            key = signature(inputs)
            ready = self._ready.get(key)
            if ready is not None and (ready is self._entered
                                      or self.memory.layouts.touch(key, ready.layout)):
                if ready is not self._entered:
                    self._enter(key, ready)
                pending = ready.pending
                if pending is None or not self.codes.note_call(pending):
                    try:
                        outputs = ready.fast(*inputs)
                    except SignatureChanged:
                        del self._ready[key]  # (its hoisted views were refused: bind anew)
                    except BaseException as e:
                        self._annotate(e)
                        raise
                    else:
                        if ready.plain_outputs:
                            return outputs
                        return self.finish(outputs, inputs)
                else:
                    del self._ready[key]  # its own code is ready: bound below
                self._fast = None
        self._entered = None
        if self._programmed:
            outputs = self._run_once(inputs)
            if outputs is not None:
                return outputs
        self.prepare(inputs)
        if self._recording and self._recorded_before():
            return self._run_recording(inputs)
        if self._recording or self._verifying:
            # (recording: the value array is observed; verifying: out variants checked)
            return self._run_reference(inputs)
        if (self._pending is not None and self._fast is not None
                and self.codes.note_call(self._pending)):
            self._fast = None  # the signature's own code is ready: bind it
        fast = self._fast or self._bind()
        try:
            outputs = fast(*inputs)
        except BaseException as e:
            self._annotate(e)
            raise
        outputs = self.finish(outputs, inputs)
        self._keep_ready()
        return outputs

    def _run_once(self, inputs: list[Any]) -> list[Any] | None:
        """While the layout cache is full: a call of a signature the cache does not admit
        (``LayoutCache.admits``: it has not come at least two more times than the layout
        it would evict), if a shape program of its structure covers it, runs that
        program's allocating code (``CodeCache.generic`` with ``kept=False``, made when the
        program was), and the arena, the layouts, the current one and its bindings are left
        as they are. None when this is not such a call: the caller prepares it as any other
        (an admitted signature is laid out, evicting the least recently used).

        A layout made for a size that does not come back would evict one that does (more
        sizes than ``plan_cache_size`` — lengths times batch sizes, say), and every layout
        turned over leaves objects the garbage collector promotes: a size not admitted
        costs a call that allocates (about what TorchScript pays on every call). While
        there is room, a size is laid out on its first call: one that comes back then pays
        nothing more (laying out on the second call cost the traffic benchmark's text
        encoder 3 % and its recommender 8 % of the mean, every size there coming back)."""
        memory = self.memory
        layouts = memory.layouts
        if len(layouts) < layouts.maxsize:
            return None
        key = signature(inputs)
        if key == self._key or key in layouts:
            return None
        shape_free = structure(key)
        programs = memory.programs.get(shape_free)
        base = memory.largest.get(shape_free)
        if not programs or base is None:
            return None
        for program in programs:
            computed = program.evaluate(inputs)
            if computed is not None:
                break
        else:
            return None
        if not fits(base, program.index, program.dtypes, computed):
            # Larger than every size laid out: the arena grows now, not on its next call.
            # (Growing makes every runtime's tensors anew: the sooner, the fewer.)
            return None
        fn = self._once.get(id(program))
        if fn is None:
            code = self.codes.made(frozenset(), program=program, kept=False)
            if code is None:
                return None  # (the builder is still making it: not made on the request path)
            fn = self._once[id(program)] = code.factory(self._refused, key)
        if layouts.admits(key):
            self.counted = key  # (noted served on its first call here: laid out now)
            return None
        if layouts.count(key) == 1:  # (a size served so again: counted once)
            memory.programs.note_served(program)
        try:
            outputs = fn(*inputs)
        except BaseException as e:
            code = self.codes.made(frozenset(), program=program, kept=False)
            for pn in code.nodes_at(_line_in(e, code.filename)):
                annotate(e, pn)
            raise
        for i in self.plan.copied_outputs:
            outputs[i] = copy_containers(outputs[i])
        return outputs

    def _keep_ready(self) -> None:
        """After a call through generated code: if nothing about the current signature is
        left to check or confirm, keep what its calls need for ``_enter``."""
        layout, fast = self.layout, self._fast
        if (fast is None or layout is None or layout.outputs
                or self._key is None or self._confirm is not None or self._verifying
                or self._recording or self.output_arena is not None
                or (layout.program is None and self._key in self.memory.unprogrammed)):
            return  # (the last: a shape program may lay it out again, ``_relay``)
        ready = self._ready
        if len(ready) >= _MAX_BINDINGS:
            ready.clear()
        values = self.values
        ready[self._key] = self._entered = _Ready(
            layout, fast, self._code, self._direct, self._pending, not self.plan.copied_outputs,
            frozenset(self.unkept), tuple([values[s] for s in self._managed]))

    def _enter(self, key: tuple, ready: _Ready) -> None:
        """Make ``ready``'s signature current: what ``prepare`` and ``install`` would set."""
        self._key = key
        self.layout = ready.layout
        self._fast, self._code, self._pending = ready.fast, ready.code, ready.pending
        self._direct, self._plain_outputs = ready.direct, ready.plain_outputs
        self._recording = self._verifying = False
        self._confirm = None  # (left by a call that raised: it was about another layout)
        self.unkept = set(ready.unkept)
        self._entered = self._unsynced = ready

    def _sync(self) -> None:
        """Put the entered signature's tensors in the value array, which only the paths
        beyond ``_Ready``'s read (``_enter`` leaves it: a switch writes no slot)."""
        ready = self._unsynced
        if ready is not None:
            self._unsynced = None
            values = self.values
            for s, t in zip(self._managed, ready.values):
                values[s] = t

    def _recorded_before(self) -> bool:
        """Whether this signature's recording call may run generated code: its structure
        (dtypes, ranks, other values) was recorded by the reference interpreter before, so
        every out variant it reaches has been checked (``runtime/checks.py``)."""
        return self.memory is not None and structure(self._key) in self.memory.structures

    def _run_recording(self, inputs: list[Any]) -> list[Any]:
        """A new signature of a known structure: the generic code with nothing in the arena,
        storing each value into the value array for the planner (as fast as a call that
        allocates; the reference interpreter pays per node for what it does generally)."""
        code = self.codes.generic(frozenset(), record=True)
        self._code = code
        values = self.values
        for slot, x in zip(self.plan.block.inputs, inputs):
            values[slot] = x
        fn = code.factory(self._refused, self._key, values)
        try:
            outputs = fn(*inputs)
            # Every value is in the array now: if a managed node met arguments whose kind
            # (dtypes, ranks) its out variant was not checked for, the layout's first call
            # from the arena checks it (a verifying call).
            self._record_checked = self._checks is None or self._checks.all_checked(
                self.plan, values)
            return self.finish(outputs, inputs)
        except BaseException as e:
            self._annotate(e)
            raise
        finally:
            self._record_checked = True
            self.clear()

    def _run_reference(self, inputs: list[Any]) -> list[Any]:
        values = self.values
        for slot, x in zip(self.plan.block.inputs, inputs):
            values[slot] = x
        try:
            self.run_block(self.plan.block)
            return self.end(inputs)
        finally:
            self.clear()

    def _arena_slots(self) -> frozenset[int]:
        values = self.values
        return frozenset(s for s in self._managed
                         if values[s] is not None and s not in self.unkept)

    def profiled_function(self, timed: frozenset[int] | None) -> tuple[Callable[..., Any], bool]:
        """The profiler's copy of the generated function for the current layout (call
        ``prepare`` first), and whether a call needs ``prepare`` before it (as ``run``
        does); call ``finish`` after. With ``timed`` (node indices) it returns
        ``(outputs, stamps)`` (see ``generate``). Exceptions are then mapped to nodes through it: meant for an
        executor of the profiler's own."""
        self._fast or self._bind()
        guard = self._guard()
        arena = self._arena_slots()
        spec = self.codes.spec_for(guard, self._key)

        def make() -> GeneratedCode:
            return function.generate(self.plan, arena, self.codes.title, guard, timed=timed, spec=spec,
                            hoisting=self.codes.hoisting_for(arena, spec))

        return self._instantiate(make), not self._direct

    def _instantiate(self, make: Callable[[], GeneratedCode]) -> Callable[..., list[Any]]:
        """``make()``'s code bound to this runtime's arena tensors; generated again without
        a hoisted node whose result turned out not to be a view (``HoistRefused``)."""
        while True:
            code = make()
            try:
                fn = code.factory(*[self.values[s] for s in code.arena_slots], self._refused,
                                  self._key)
            except HoistRefused as e:
                self.codes.refuse(e.node)
                continue
            self._code = code
            return fn

    def _guard(self) -> tuple[bool, ...] | None:
        # Check the signature inside the generated code when memory is planned per
        # signature and no output arena needs its own check before a call.
        guarded = self._key is not None and not (self.layout and self.layout.outputs)
        if not guarded:
            return None
        # The direct tensor check only for inputs typed ``Tensor``: an ``Optional[Tensor]``
        # may be None on the next call (``_sig`` compares anything).
        guard = tuple(guard_kind(k, v.type) for k, v in zip(self._key, self.plan.graph.inputs))
        if self._own_key:
            # Checking the signature costs time on every call: only worth it when the code
            # for this signature folds something (otherwise the generic code runs, as it
            # would with specialisation off).
            spec = self.codes.spec_for(guard, self._key)
            if not (spec.known or spec.taken or spec.dropped):
                return None
        return guard

    def _bind(self) -> Callable[..., list[Any]]:
        arena = self._arena_slots()
        layout_id = id(self.layout) if self.layout is not None else None
        guard = self._guard()
        codes = self.codes
        self._pending = None
        if (guard is not None and codes.hot is not None and self._key is not None
                and layout_id is not None and not self._own_key):
            self._pending = codes.pending(arena, layout_id, guard, self._key,
                                          programmed=self.layout.program is not None)
        if self._pending is not None:
            # A signature not (yet) hot: the shared generic code serves it.
            codes.note_call(self._pending)
            program = self.layout.program
            self._fast = self._instantiate(lambda: codes.generic(arena, program=program))
            self._direct = False
            self._plain_outputs = False
            return self._keep_binding()
        guarded = guard is not None
        self._fast = self._instantiate(
            lambda: self.codes.get(arena, layout_id, guard, self._key))
        # ``_direct``: the fast path may skip ``prepare`` (nothing to check outside the code).
        self._direct = guarded or not (self.memory is not None and self._managed)
        self._plain_outputs = not self.plan.copied_outputs and not (
            self.layout is not None and self.layout.outputs)
        return self._keep_binding()

    def _keep_binding(self) -> Callable[..., list[Any]]:
        layout = self.layout
        if layout is not None:
            if len(self._bindings) >= _MAX_BINDINGS:
                self._bindings.clear()
            self._bindings[id(layout)] = (layout, self._fast, self._code, self._direct,
                                          self._plain_outputs, self._pending,
                                          frozenset(self.unkept))
        return self._fast

    def _refused(self, e: RuntimeError, slot: int, fn: Callable[..., Any], *args: Any) -> Any:
        """Called by generated code when an out variant failed: if PyTorch refused to grow
        an arena tensor, allocate this value from now on (new code next call)."""
        if not _is_refused_resize(e):
            raise e
        self._sync()
        self.refused_write(slot, self.values[slot])
        self._fast = None
        self._ready.pop(self._key, None)
        self._entered = None
        return fn(*args)

    def _annotate(self, e: BaseException) -> None:
        code = self._code
        if code is None:
            return
        for pn in code.nodes_at(_line_in(e, code.filename)):
            annotate(e, pn)


def _line_in(e: BaseException, filename: str) -> int | None:
    """The line of ``filename`` (generated code) the exception ``e`` was raised at, the
    innermost if several; None if it did not pass through that code."""
    tb, lineno = e.__traceback__, None
    while tb is not None:
        if tb.tb_frame.f_code.co_filename == filename:
            lineno = tb.tb_lineno
        tb = tb.tb_next
    return lineno
