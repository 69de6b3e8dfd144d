"""The code cache: generated code per layout, values kept out of the arena and (when
specialised) input signature, shared by a module's runtimes; the generic code keyed by arena
slots and shape program that serves a signature until it is hot enough for its own."""

from __future__ import annotations

import dataclasses
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

from static_runtime.ir.graph import Node
from static_runtime.runtime.codegen import function
from static_runtime.runtime.codegen.function import GeneratedCode
from static_runtime.runtime.hoist import Hoister, Hoisting
from static_runtime.runtime.hot import PROGRAM_CALLS, BackgroundBuilder, HotSignatures
from static_runtime.runtime.plan import ExecutionPlan
from static_runtime.runtime.specialize import Specialization, Specializer


class CodeCache:
    """Generated code per (layout, values kept out of the arena, and, when specialised, input
    signature), shared by a module's runtimes; the least recently used of more than
    ``maxsize`` entries is dropped (runtimes keep the functions they hold).

    With ``specialize_after`` (and specialisation on), code specialised on a signature is
    made only once the signature is hot (``runtime/hot.py``), on a background thread; until
    then the *generic* code serves it — one function per set of arena values, shared by
    every layout and size, folding nothing a size decides (``generic``)."""

    def __init__(self, plan: ExecutionPlan, title: str, *, specialize: bool = False,
                 hoist: bool = False, maxsize: int | None = None, specialize_after: int = 0):
        import threading

        self.plan = plan
        self.title = title
        self.maxsize = maxsize
        #: specialises code on the input signature its guard checks (None: off)
        self.specializer = Specializer(plan) if specialize else None
        #: which signatures are hot enough for code of their own (None: every signature gets
        #: its code on its first call from the arena, as it waits)
        self.hot = HotSignatures(specialize_after) if specialize and specialize_after else None
        self.builder = BackgroundBuilder("static_runtime-specialize", urgent=True)
        self._generic: dict[tuple, GeneratedCode] = {}
        self._programs: dict[int, Any] = {}
        #: how many distinct functions were generated and kept (generic and specialised), for
        #: benchmarks and tests; ``duplicates``: made by one thread while another made the
        #: same (a request needing code the builder was making that moment), and dropped
        self.generated = 0
        self.duplicates = 0
        #: takes views of arena tensors once per layout (None: off)
        self.hoister = Hoister(plan) if hoist else None
        #: nodes a factory found not to give views of their arena tensor (``HoistRefused``)
        self.not_views: frozenset[Node] = frozenset()
        self._items: OrderedDict[tuple, GeneratedCode] = OrderedDict()
        self._specs: OrderedDict[tuple, Specialization] = OrderedDict()
        self._lock = threading.Lock()
        self.latest: GeneratedCode | None = None

    def spec_for(self, guard: tuple[bool | tuple[str, int], ...] | None, key: tuple | None
                 ) -> Specialization | None:
        """What code guarded by ``key`` may fold (None when not specialising)."""
        if self.specializer is None or guard is None or key is None:
            return None
        with self._lock:
            spec = self._specs.get(key)
        if spec is None:
            # (outside the lock: a background build must not hold up the request path)
            spec = self.specializer.specialize(key)
        with self._lock:
            spec = self._specs.setdefault(key, spec)
            self._specs.move_to_end(key)
            while self.maxsize is not None and len(self._specs) > self.maxsize:
                self._specs.popitem(last=False)
        return spec

    def hoisting_for(self, arena_slots: frozenset[int], spec: Specialization | None
                     ) -> Hoisting | None:
        if self.hoister is None or not arena_slots:
            return None
        return self.hoister.plan_for(arena_slots, spec, self.not_views)

    def refuse(self, node: Node) -> None:
        """Never hoist ``node`` again (its result was not a view of its arena tensor)."""
        with self._lock:
            self.not_views = self.not_views | {node}

    def _cache_key(self, arena_slots: frozenset[int], layout_id: int | None,
                   guard: tuple[bool | tuple[str, int], ...] | None, key: tuple | None
                   ) -> tuple:
        specialized = self.specializer is not None and guard is not None and key is not None
        return (layout_id, arena_slots, guard, key if specialized else None, self.not_views)

    def get(self, arena_slots: frozenset[int], layout_id: int | None,
            guard: tuple[bool | tuple[str, int], ...] | None = None, key: tuple | None = None) -> GeneratedCode:
        cache_key = self._cache_key(arena_slots, layout_id, guard, key)
        with self._lock:
            code = self._items.get(cache_key)
            if code is not None:
                self._items.move_to_end(cache_key)
        if code is None:
            # Specialised and generated outside the lock (a background build holds it for
            # tens of milliseconds otherwise); two threads may both make it: one is kept.
            spec = self.spec_for(guard, key)
            made = function.generate(self.plan, arena_slots, self.title, guard, spec=spec,
                            hoisting=self.hoisting_for(arena_slots, spec))
            with self._lock:
                code = self._items.setdefault(cache_key, made)
                if code is made:
                    self.generated += 1
                else:
                    self.duplicates += 1
                self._items.move_to_end(cache_key)
                while self.maxsize is not None and len(self._items) > self.maxsize:
                    self._items.popitem(last=False)
        self.latest = code
        return code

    def generic(self, arena_slots: frozenset[int], record: bool = False,
                program: Any = None, ahead: bool = False, kept: bool = True) -> GeneratedCode:
        """The code for any signature with these values in the arena: no guard, nothing a
        size decides folded, no views taken ahead (the arena tensors' shapes are the
        layout's, whichever it is). ``record``: the variant that also stores every value
        into the executor's value array (``generate``). ``program``: the shape program that
        made the layouts it serves, whose ``spec`` (ranks, dtypes, branches its guards
        decide) it folds. ``ahead``: made before any call runs it (``mod.code`` keeps
        showing what runs). ``kept=False``: the variant that keeps nothing per binding (no
        memos, no views kept), so that one binding serves every size — what a size's
        allocating first call runs, with nothing in the arena (``CodegenExecutor.
        _run_once``)."""
        key = self._generic_key(arena_slots, record, program, kept)
        with self._lock:
            code = self._generic.get(key)
        if code is None:
            spec = getattr(program, "spec", None)
            if spec is not None and not kept:
                spec = dataclasses.replace(spec, memo=set(), memo_views=set())
            made = function.generate(self.plan, arena_slots, self.title, record=record, spec=spec,
                            structural=spec is not None)
            with self._lock:
                if spec is not None:
                    self._programs[id(program)] = program  # (its id stays its own)
                code = self._generic.setdefault(key, made)
                if code is made:
                    self.generated += 1
                else:
                    self.duplicates += 1
        if not (record or ahead):
            self.latest = code
        return code

    def made(self, arena_slots: frozenset[int], record: bool = False, program: Any = None,
             kept: bool = True) -> GeneratedCode | None:
        """``generic(...)`` if it was made already, else None (never generates)."""
        return self._generic.get(self._generic_key(arena_slots, record, program, kept))

    @staticmethod
    def _generic_key(arena_slots: frozenset[int], record: bool, program: Any, kept: bool
                     ) -> tuple:
        # (a program without a spec folds nothing, and has nothing to keep: the plain code)
        spec = getattr(program, "spec", None)
        return (arena_slots, record, id(program) if spec is not None else None,
                kept or spec is None)

    def pending(self, arena_slots: frozenset[int], layout_id: int,
                guard: tuple[bool | tuple[str, int], ...], key: tuple,
                programmed: bool = False) -> Pending | None:
        """What the generic code serving this signature and layout waits for: None if the
        signature's own code exists already. ``programmed``: a shape program made the layout
        (its code keeps what the signature decides: own code pays only after
        ``hot.PROGRAM_CALLS`` calls)."""
        cache_key = self._cache_key(arena_slots, layout_id, guard, key)
        if cache_key in self._items:  # (a dict lookup: atomic, no lock needed)
            return None
        return Pending(cache_key, layout_id, self.not_views, (arena_slots, layout_id, guard, key),
                       PROGRAM_CALLS if programmed else 0)

    def note_call(self, pending: Pending) -> bool:
        """Count a call the generic code served for ``pending``'s signature (once per call of
        the generic code: keep it cheap); once the signature is hot, have its own code built
        in the background. Whether the caller should bind again: that code is ready (or the
        views refused since changed the code's key)."""
        if pending.not_views is not self.not_views or (
                pending.asked and pending.cache_key in self._items):
            return True
        if self.hot is not None and self.hot.note(pending.layout_id, pending.after):
            pending.asked.append(True)
            self.builder.submit(pending.cache_key, lambda: self.get(*pending.build))
        return False


@dataclass(frozen=True)
class Pending:
    """A signature the generic code serves until its own code is built."""

    #: the key its own code will have in ``CodeCache``
    cache_key: tuple
    #: what its calls are counted by (its layout stands for its signature: one per signature)
    layout_id: int
    #: the views refused when the key was made (another set makes another key)
    not_views: frozenset
    #: ``CodeCache.get``'s arguments that build its own code
    build: tuple
    #: calls in all it makes before it is hot (``HotSignatures.note``)
    after: int = 0
    #: not empty once its own code was asked for (only then is the cache looked at: the
    #: key's hash is most of a call's counting)
    asked: list = field(default_factory=list, compare=False)

