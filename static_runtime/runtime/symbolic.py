"""Shape programs: each managed tensor's shape as integer expressions of the input sizes,
worked out once per signature structure, so that a new size is laid out without a recording
run.

A recording call (``runtime/interpreter.py``) learns the sizes of one signature by running it
and looking; for traffic of every size that is a slow call on most requests. A *shape
program* learns them for every size at once: the plan runs once on fake tensors whose sizes
are symbols (``FakeTensorMode`` over a ``ShapeEnv``; every dimension of every input tensor
is a symbol, none taken for 0 or 1 and no two taken for equal), and each managed value's
shape and strides come out as expressions of those symbols. What the run had to decide about
the sizes — a branch on a size, a broadcast, a view — the ``ShapeEnv`` keeps as *guards*.
The program is one generated function: it checks the guards on a call's inputs and returns
every managed value's shape and strides, or None when a guard fails (that size is outside
what the program covers: it records, as before).

What a program never does is guess. It is not made (``Unsupported``, with the reason) when
the run meets what it cannot follow: a fork, a loop of more than ``MAX_ITERATIONS``
iterations (a loop is followed iteration by iteration, its trip count and conditions
decided under the guards, and nothing its body computes is folded), an operator outside
PyTorch's and
ours (user code, never run at preparation), a random or effectful operator, a raise, an
input that is a list or dict of tensors, a value read from a tensor's data (``item()`` of
anything but a size turned into a tensor, which the run follows as the symbol it is), a
managed value whose shape needs such a value, or an out variant not yet checked for the
arguments it would meet (``runtime/checks.py``). And what it computes is confirmed: the first
call served from a layout it made compares every arena tensor's shape with the program's
(``Interpreter.finish``); a difference retires the program with a ``RuntimeWarning`` (that
call's results are right either way: an out variant resizes a tensor that is too small for
it, or refuses to grow one past its region and the runtime allocates).

The fake-tensor run is ``runtime/symbolic_run.py``; this module compiles what it finds into
a program and keeps the programs per signature structure (``ShapePrograms``).
"""

from __future__ import annotations

import dataclasses
import functools
import linecache
import re
import threading
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from itertools import count
from typing import Any

import torch

from static_runtime.memory.arena import ArenaLayout, Observation, build_layout, refit
from static_runtime.runtime.facts import Specialization
from static_runtime.runtime.hot import yield_to_requests
from static_runtime.runtime.plan import ExecutionPlan
from static_runtime.runtime.symbolic_run import (
    Runner,
    Unsupported,
    fake_constant,
    holds_tensor,
    stand_in,
)
from static_runtime.runtime.symbolic_spec import structure_spec
from static_runtime.runtime.torch_threads import separate_pre_dispatch_modes

#: how many programs a structure keeps (each covers the sizes its guards admit: a program
#: made from a batch of 1 covers batch 1 only, for instance)
PROGRAMS_PER_STRUCTURE = 4

_counter = count()


@dataclass(frozen=True)
class ShapeProgram:
    """Every managed value's shape and strides for any call its guards admit."""

    #: the generated source (``evaluate``'s), for reading
    source: str
    #: inputs → per slot in ``slots``: ``(shape, strides)``, strides None for row-major (for
    #: every size the guards admit); None when a guard fails
    evaluate: Callable[[list[Any]], tuple | None]
    #: the managed slots it computes, in order
    slots: tuple[int, ...]
    dtypes: tuple[torch.dtype, ...]
    #: symbol → where its value comes from (``input_ids.size(1)``)
    symbols: dict[str, str]
    #: slot → its shape, as text (``(s1, 128)``)
    shapes: dict[int, str]
    #: the guards, as text (over the inputs' names)
    guards: str
    #: what every call the guards admit has in common beyond sizes (None: nothing folded)
    spec: Specialization | None = None

    @functools.cached_property
    def index(self) -> dict[int, int]:
        """Slot → its position in ``slots`` (and in what ``evaluate`` returns)."""
        return {slot: i for i, slot in enumerate(self.slots)}

    def layout(self, inputs: list[Any], base: ArenaLayout, lifetimes: Any, slot_of: dict,
               planner: str) -> ArenaLayout | None:
        """The arena layout of ``inputs``' sizes, placed where ``base`` (a layout of the same
        structure) put each value if it fits there; None when a guard fails."""
        computed = self.evaluate(inputs)
        if computed is None:
            return None
        fitted = refit(base, self.index, self.dtypes, computed, self)
        if fitted is not None:
            return fitted
        keep = {spec.slot for spec in base.specs} | {spec.slot for spec in base.outputs}
        observed = {slot: Observation(dtype, shape, True, strides)
                    for slot, dtype, (shape, strides) in zip(self.slots, self.dtypes, computed)
                    if slot in keep}
        return dataclasses.replace(
            build_layout(lifetimes, slot_of, observed, planner=planner,
                         unplanned_bytes=base.plan.unplanned_bytes, checked=True, base=base),
            program=self)


@dataclass
class ShapePrograms:
    """The programs of one module, per signature structure (thread-safe); made on a
    background thread (``schedule``), never while a request waits."""

    _items: dict[tuple, list[ShapeProgram]] = field(default_factory=dict)
    #: structure → why no program could be made for it (the latest attempt)
    failures: dict[tuple, str] = field(default_factory=dict)
    #: structure → how many programs were asked for
    _asked: dict[tuple, int] = field(default_factory=dict)
    #: structures a program is being made for
    _pending: set = field(default_factory=set)
    #: structure → the latest uncovered call's arguments to ``schedule`` while one was made
    _next: dict = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _builder: Any = None
    #: id of a program → how many sizes it served without a recording call, laid out or
    #: run once by its allocating code (a statistic: not locked)
    served: dict[int, int] = field(default_factory=dict)
    #: called on the builder's thread with (structure, program) once a program is ready:
    #: the module generates the code its layouts will run there, not on the request path
    on_ready: Callable[[tuple, ShapeProgram], None] | None = None

    def __post_init__(self) -> None:
        # What a build imports lazily is imported here, on the thread preparing the module
        # (~0.7 s once per process, for ``torch._dynamo``): imported first by the builder
        # while the request thread's first use of PyTorch imports it too, a module with
        # circular imports such as ``torch._dynamo`` fails in one of them ("deadlock
        # detected", "partially initialized module").
        import torch._dynamo.source
        import torch._subclasses.fake_tensor
        import torch.fx.experimental.symbolic_shapes
        import torch.utils._sympy.printers

        # (a new symbol notes where it was made, skipping "uninteresting" files: the first
        # time, that imports ``torch.export``, AOT autograd and networkx, ~0.1–0.4 s)
        torch.fx.experimental.symbolic_shapes.uninteresting_files()

    def note_served(self, program: ShapeProgram) -> None:
        self.served[id(program)] = self.served.get(id(program), 0) + 1

    def get(self, structure: tuple) -> list[ShapeProgram]:
        return self._items.get(structure, ())

    def schedule(self, structure: tuple, plan: ExecutionPlan, inputs: list[Any],
                 checks: Any, names: list[str]) -> None:
        """Have a program made for ``structure`` from ``inputs``' sizes (a call none of its
        programs covered), unless it has as many as it keeps or failed as often. While one
        is being made, the latest such call waits its turn (it may be covered once that one
        is ready)."""
        from static_runtime.runtime.hot import BackgroundBuilder

        if any(p.evaluate(inputs) is not None for p in self.get(structure)):
            return  # covered (by a program made while this call recorded)
        # only the inputs' metadata is kept: tensors of the same sizes and strides
        example = [stand_in(x) for x in inputs]
        with self._lock:
            if structure in self._pending:
                self._next[structure] = (plan, example, checks, names)
                return
            asked = self._asked.get(structure, 0)
            if asked >= PROGRAMS_PER_STRUCTURE:
                return
            self._asked[structure] = asked + 1
            self._pending.add(structure)
            if self._builder is None:
                self._builder = BackgroundBuilder("static_runtime-shapes")

        def build() -> None:
            try:
                program = build_program(plan, example, checks, names)
            except Exception as e:  # noqa: BLE001  (Unsupported, or a fault of ours: recorded)
                reason = str(e) if isinstance(e, Unsupported) else f"{type(e).__name__}: {e}"
                with self._lock:
                    self.failures[structure] = reason
            else:
                self.add(structure, program)
                if self.on_ready is not None:
                    self.on_ready(structure, program)
                wide = _widened(example)
                if wide is not None and program.evaluate(wide) is None:
                    # A dimension of 1 made a program for 1 only (a batch of one): one more
                    # from the same sizes with those dimensions 2, for the other sizes. If
                    # the model cannot take them (a raise), nothing is lost.
                    try:
                        widened = build_program(plan, wide, checks, names)
                    except Exception:  # noqa: BLE001  (the first program stands)
                        widened = None
                    if widened is not None:
                        self.add(structure, widened)
                        if self.on_ready is not None:
                            self.on_ready(structure, widened)
            finally:
                with self._lock:
                    self._pending.discard(structure)
                    waiting = self._next.pop(structure, None)
            if waiting is not None and not any(
                    p.evaluate(waiting[1]) is not None for p in self.get(structure)):
                self.schedule(structure, waiting[0], waiting[1], waiting[2], waiting[3])

        self._builder.submit((structure, asked), build)

    def settled(self, structure: tuple) -> bool:
        """Whether no program is being made for ``structure``."""
        with self._lock:
            return structure not in self._pending

    def wait(self) -> None:
        """Block until every program asked for so far is made (tests, benchmarks)."""
        if self._builder is not None:
            self._builder.wait()

    def add(self, structure: tuple, program: ShapeProgram) -> None:
        with self._lock:
            # a new list: readers iterate the old one without the lock
            self._items[structure] = [*self._items.get(structure, ()), program]
            self.failures.pop(structure, None)

    def retire(self, structure: tuple, program: ShapeProgram, reason: str) -> None:
        with self._lock:
            self._items[structure] = [p for p in self._items.get(structure, ())
                                      if p is not program]
            self.failures[structure] = reason
        warnings.warn(f"static_runtime: a shape program was retired ({reason}); new sizes of "
                      "that signature structure record again", RuntimeWarning, stacklevel=2)

    def describe(self) -> list[str]:
        """Lines for ``StaticModule.describe()``: each structure's programs and what they
        laid out, and why a structure has none."""
        lines = []
        with self._lock:
            items = list(self._items.items())
            failures = list(self.failures.items())
        for structure, programs in items:
            for p in programs:
                symbols = ", ".join(f"{s} = {where}" for s, where in p.symbols.items())
                lines.append(f"shape program for {_structure_text(structure)}: sizes in "
                             f"{symbols or 'no symbol (one size)'}; served "
                             f"{self.served.get(id(p), 0)} sizes without a recording call")
                if p.guards:
                    lines.append(f"  guards: {p.guards}")
        for structure, reason in failures:
            lines.append(f"no shape program for {_structure_text(structure)}: {reason}")
        return lines


def _structure_text(structure: tuple) -> str:
    parts = []
    for k in structure:
        if isinstance(k, tuple) and len(k) >= 2 and isinstance(k[0], torch.dtype):
            parts.append(f"{str(k[0]).removeprefix('torch.')} rank {k[1]}")
        else:
            parts.append(repr(k))
    return "(" + ", ".join(parts) + ")"


@functools.cache
def _fake_mode_class() -> type:
    """``FakeTensorMode`` whose every operator (those an operator's decomposition calls too)
    is a point where a build on a builder thread gives way to calls (``yield_to_requests``):
    one node's fake run takes up to tens of milliseconds (an activation decomposed into
    refs over symbolic sizes), and a request waiting for the GIL meanwhile waits that long."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    class PausingFakeTensorMode(FakeTensorMode):
        def dispatch(self, func, types, args=(), kwargs=None):
            yield_to_requests()()
            return super().dispatch(func, types, args, kwargs)

    return PausingFakeTensorMode


def build_program(plan: ExecutionPlan, example: list[Any], checks: Any = None,
                  names: list[str] | None = None) -> ShapeProgram:
    """The shape program of ``example``'s structure, with its sizes as the symbols' hints
    (guards hold for them). ``checks``: the module's ``OutVariantChecks`` (the program is
    refused while an out variant it would reach is unchecked for its arguments). ``names``:
    the inputs' names, for ``symbols``. Raises ``Unsupported``."""
    from torch._dynamo.source import LocalSource
    from torch.fx.experimental.symbolic_shapes import (
        DimDynamic,
        ShapeEnv,
        StatelessSymbolicContext,
    )

    separate_pre_dispatch_modes()
    env = ShapeEnv(duck_shape=False, specialize_zero_one=False)
    mode = _fake_mode_class()(shape_env=env, allow_non_fake_inputs=False)
    mode.cache_enabled = False  # (FakeTensorMode.cache is one dict for every thread)
    values: list[Any] = [None] * plan.n_slots
    placeholders, positions = [], []
    # (no ``warnings.catch_warnings``: this runs on a background thread, and that context
    # swaps the process-wide filters under every other thread)
    numbers = {slot: int(const.item()) for slot, const in plan.constants.items()
               if isinstance(const, torch.Tensor) and const.dim() == 0
               and not const.is_floating_point() and not const.is_complex()}
    with mode:
        runner = Runner(values, plan.constants,
                        [slot for slot, x in zip(plan.block.inputs, example)
                         if not isinstance(x, torch.Tensor)])
        for slot, const in plan.constants.items():
            values[slot] = fake_constant(mode, const)
            if slot in numbers:  # a 0-dim integer constant: a number a size may meet
                runner.sizes[id(values[slot])] = (numbers[slot], values[slot])
        for i, (slot, x) in enumerate(zip(plan.block.inputs, example)):
            if isinstance(x, torch.Tensor):
                if x.layout != torch.strided or x.device.type != "cpu":
                    raise Unsupported(f"input {i} is not a dense CPU tensor")
                fake = mode.from_tensor(
                    x, source=LocalSource(f"t{len(placeholders)}"),
                    symbolic_context=StatelessSymbolicContext(
                        dynamic_sizes=[DimDynamic.DYNAMIC] * x.dim()))
                placeholders.append(fake)
                positions.append(i)
                values[slot] = fake
            elif holds_tensor(x):
                raise Unsupported(f"input {i} is a container of tensors")
            else:
                values[slot] = x
        try:
            runner.block(plan.block)
        except Unsupported:
            raise
        except Exception as e:  # noqa: BLE001  (anything the fake run cannot follow)
            where = runner.where or "the graph"
            raise Unsupported(f"{where}: {type(e).__name__}: {str(e).splitlines()[0][:200]}"
                              ) from None
        slots, dtypes, shapes, strides = [], [], [], []
        pause = yield_to_requests()
        for s in plan.managed_slots + plan.output_slots:
            pause()
            v = values[s]
            if not isinstance(v, torch.Tensor):
                continue  # not produced (a branch not taken): not managed for these sizes
            if v.is_contiguous():
                layout = None  # row-major (decided under the guards, so for every size)
            elif v.dim() == 4 and v.is_contiguous(memory_format=torch.channels_last):
                layout = tuple(v.stride())
            else:
                continue  # not dense: never in the arena
            slots.append(s)
            dtypes.append(v.dtype)
            shapes.append(tuple(v.shape))
            strides.append(layout)
        # (only what the arena may hold: a value that is not dense is allocated, as a
        # recording call leaves it, and its out variant never runs)
        if checks is not None and not checks.all_checked(plan, values, only=set(slots)):
            raise Unsupported("an out variant is not yet checked for the arguments it meets")
        guards = env.produce_guards_expression(placeholders, ignore_static=False) or ""
    spec = structure_spec(plan, runner, values)
    symbols = {}
    for sym, sources in env.var_to_sources.items():
        if sources:
            symbols[str(sym)] = sources[0].name
    return _compile(env, slots, dtypes, shapes, strides, guards, symbols, positions, names,
                    spec)


def _compile(env, slots, dtypes, shapes, strides, guards, symbols, positions, names, spec
             ) -> ShapeProgram:
    from torch.fx.experimental.symbolic_shapes import SYMPY_INTERP
    from torch.utils._sympy.printers import PythonPrinter

    printer = PythonPrinter()
    used: set[str] = set()

    def spell(d: Any) -> str:
        if isinstance(d, int):
            return str(d)
        expr = env.replace(d.node.expr)
        free = {str(s) for s in expr.free_symbols}
        if not free <= symbols.keys():
            raise Unsupported(f"a managed value's size depends on data ({expr})")
        used.update(free)
        return printer.doprint(expr)

    def tup(items: list[str]) -> str:
        return "(" + ", ".join(items) + ("," if len(items) == 1 else "") + ")"

    entries, texts = [], {}
    pause = yield_to_requests()
    for slot, shape, stride in zip(slots, shapes, strides):
        pause()
        dims = tup([spell(d) for d in shape])
        texts[slot] = dims
        entries.append(f"({dims}, {'None' if stride is None else tup([spell(d) for d in stride])})")

    def fast(text: str) -> str:
        # L['t0'].size()[1] → t0s[1]: each input's sizes and strides read once
        text = re.sub(r"L\['t(\d+)'\]\.size\(\)\[(\d+)\]", r"t\1s[\2]", text)
        text = re.sub(r"L\['t(\d+)'\]\.stride\(\)\[(\d+)\]", r"t\1st[\2]", text)
        return re.sub(r"L\['t(\d+)'\]", r"t\1", text)

    lines = ["def evaluate(inputs):"]
    for j, i in enumerate(positions):
        lines.append(f"    t{j} = inputs[{i}]; t{j}s = t{j}.shape; t{j}st = t{j}.stride()")
    if guards:
        lines.append(f"    if not ({fast(guards)}):")
        lines.append("        return None")
    for s in sorted(used):
        lines.append(f"    {s} = {fast(symbols[s])}")
    lines.append("    return (" + "".join(f"\n        {e}," for e in entries) + ")")
    source = "\n".join(lines) + "\n"
    filename = f"<static_runtime shape program {next(_counter)}>"
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    namespace = dict(SYMPY_INTERP)
    exec(compile(source, filename, "exec"), namespace)  # noqa: S102  (our own generated code)

    def where(text: str) -> str:
        # L['t0'].size()[1] → input_ids.size(1)
        for j, i in enumerate(positions):
            text = text.replace(f"L['t{j}']", names[i] if names else f"input{i}")
        return re.sub(r"\.(size|stride)\(\)\[(\d+)\]", r".\1(\2)", text)

    return ShapeProgram(source, namespace["evaluate"], tuple(slots), tuple(dtypes),
                        {s: where(symbols[s]) for s in sorted(used)}, texts,
                        where(guards) if guards else "", spec)


def _widened(example: list[Any]) -> list[Any] | None:
    """``example`` with every tensor dimension of 1 made 2 (None: it has none)."""
    if not any(isinstance(x, torch.Tensor) and 1 in x.shape for x in example):
        return None
    return [torch.empty([2 if d == 1 else d for d in x.shape], dtype=x.dtype)
            if isinstance(x, torch.Tensor) else x for x in example]
