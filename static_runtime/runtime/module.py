"""``StaticModule`` (shared, immutable after construction) and ``StaticRuntime`` (per thread).

``StaticModule`` imports the model, prepares the graph, selects an implementation for every
node and decides which tensors are kept between runs — all once. ``StaticRuntime`` holds
what changes per call (the value array and kept tensors). Calling the module borrows a
runtime from a pool, so a module may be called from many threads at once.
"""

from __future__ import annotations

import dataclasses
import os
import sys
import threading
from collections import Counter
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import torch
import torch.utils._pytree as pytree

from static_runtime.frontend import import_model
from static_runtime.frontend.export import ExportSignature, is_pt2, split_example
from static_runtime.ir.graph import Graph
from static_runtime.ir.verifier import verify
from static_runtime.memory.cache import LayoutCache, structure
from static_runtime.memory.lifetimes import Lifetimes
from static_runtime.memory.lifetimes import analyze as analyze_lifetimes
from static_runtime.memory.planner import MemoryPlan, plan_best
from static_runtime.ops.kernels import KernelChooser
from static_runtime.ops.registry import Tier, evaluator
from static_runtime.passes.pipeline import run_passes
from static_runtime.runtime import metrics
from static_runtime.runtime.ahead import plan_ahead
from static_runtime.runtime.binding import make_binder
from static_runtime.runtime.checks import OutVariantChecks
from static_runtime.runtime.codegen import CodeCache, CodegenExecutor
from static_runtime.runtime.futures import check_launcher, using_launcher
from static_runtime.runtime.hot import CALLS, settle_imports
from static_runtime.runtime.interpreter import Interpreter, MemoryConfig
from static_runtime.runtime.options import StaticModuleOptions
from static_runtime.runtime.plan import Control, ExecutionPlan, build_plan, may_hold_list_or_dict
from static_runtime.runtime.symbolic import ShapePrograms

_inference_mode_enabled = torch.is_inference_mode_enabled


def prepare(model: Any, options: StaticModuleOptions | None = None, *,
            example_inputs: Any = None, dynamic_shapes: Any = None) -> Graph:
    """Import ``model`` and run the graph passes (PrepareForStaticRuntime); returns the IR.

    A plain ``nn.Module`` is exported with ``torch.export`` from ``example_inputs`` (and
    ``dynamic_shapes``, passed through)."""
    options = options or StaticModuleOptions()
    if isinstance(model, PreparedGraph):
        # Prepared before (a module loaded from disk): used as is, the passes are not re-run.
        return model.graph
    graph = import_model(model, freeze=options.freeze, example_inputs=example_inputs,
                         dynamic_shapes=dynamic_shapes)
    verify(graph)
    run_passes(graph, options.passes_enabled(), evaluate=evaluator,
               verify_each=options.verify_passes,
               measured_kernels=options.kernel_choice == "measure")
    verify(graph)
    return graph


@dataclass(frozen=True)
class PreparedGraph:
    """A graph ``prepare`` already ran on (with the options it is built with); see
    ``StaticModule.from_prepared``."""

    graph: Graph
    #: what the graph was prepared from, for the generated code's header
    origin: str


def _slots_may_alias(lifetimes: Lifetimes, plan: ExecutionPlan) -> dict[int, frozenset[int]]:
    """Managed slot → the slots of the values that may alias it (``Lifetimes.aliases``)."""
    slot_of = plan.slot_of
    return {slot_of[v]: frozenset(slot_of[w] for w in others if w in slot_of)
            for v, others in lifetimes.aliases.items() if v in slot_of}


class StaticModule:
    """A model prepared once for fast repeated inference.

    ``model`` is a ``torch.jit.ScriptModule``, ``ScriptFunction``, ``torch._C.Graph``, a
    path to a TorchScript archive, or a prepared IR ``Graph``; or a
    ``torch.export.ExportedProgram``, a path to a ``.pt2`` archive, or a plain ``nn.Module``
    with ``example_inputs`` (exported with ``torch.export``, ``dynamic_shapes`` passed
    through). Unsupported operators are reported here, with kind, schema and source line.
    """

    def __init__(self, model: Any, options: StaticModuleOptions | None = None,
                 example_inputs: Any = None, *, dynamic_shapes: Any = None):
        if options is not None and not isinstance(options, StaticModuleOptions):
            raise TypeError(f"options must be StaticModuleOptions, got {type(options).__name__}")
        modules_before = len(sys.modules)
        self.options = options or StaticModuleOptions()
        self.graph: Graph = prepare(model, self.options, example_inputs=example_inputs,
                                    dynamic_shapes=dynamic_shapes)
        manage = self.options.enable_out_variant and self.options.optimize_memory
        self.lifetimes = Lifetimes(0, ())
        #: chooses GEMM kernels by measurement (``kernel_choice="measure"``), else None
        self.kernels: KernelChooser | None = (
            KernelChooser() if self.options.kernel_choice == "measure" else None)

        def managed_values(is_out_variant) -> tuple[set, set]:
            self.lifetimes = analyze_lifetimes(
                self.graph, is_out_variant,
                manage_outputs=self.options.manage_output_tensors)
            return {lt.value for lt in self.lifetimes.managed}, set(self.lifetimes.outputs)

        self.plan: ExecutionPlan = build_plan(
            self.graph, enable_out_variant=self.options.enable_out_variant,
            managed=managed_values if manage else None,
            copied_outputs=tuple(i for i, v in enumerate(self.graph.outputs)
                                 if may_hold_list_or_dict(v.type)),
            fast_bindings=self.options.fast_bindings,
            variadic_sizes=self.options.variadic_sizes,
            kernels=self.kernels)
        self.layouts = LayoutCache(self.options.plan_cache_size)
        self._codes = CodeCache(self.plan, _describe_model(model),
                                specialize=self.options.specialize_signature,
                                hoist=self.options.hoist_views,
                                maxsize=self.options.plan_cache_size,
                                specialize_after=self.options.specialize_after)
        #: verdicts on out variants (``runtime/checks.py``), None when trusted
        self.out_variant_checks = OutVariantChecks() if (
            manage and self.options.check_out_variants) else None
        self._memory = MemoryConfig(
            self.lifetimes, self.layouts, self.options.memory_planner,
            self.options.verify_memory_plans, self.out_variant_checks,
            programs=ShapePrograms() if self.options.shape_programs else None,
            input_names=tuple(v.name for v in self.graph.inputs),
            may_alias=_slots_may_alias(self.lifetimes, self.plan)) if manage else None
        if self._memory is not None and self._memory.programs is not None:
            self._memory.programs.on_ready = self._program_ready
        self.binder = make_binder(self.graph)
        #: rebuilds the user's output structure from the graph's flat outputs (an exported
        #: program returning a tuple, list or dict), or None: one output returned as is
        self.unflatten_outputs = _output_unflattener(self.graph)
        # The runtime pool: idle runtimes, most recently returned last (LIFO: its arena and
        # code are warm). ``list.pop``/``append`` are atomic, so borrowing and returning take
        # no lock; only creating a runtime or waiting for one (``max_runtimes``) does.
        self._idle: list[StaticRuntime] = []
        self._pool_cond = threading.Condition(threading.Lock())
        self._pool_created = 0
        self._pool_waiting = 0
        self._cached: StaticRuntime | None = None
        #: why planning ahead from ``example_inputs`` was not possible (None if it was, or
        #: if no example inputs were given)
        self.ahead_of_time_error: str | None = None
        if example_inputs is not None and self._memory is not None:
            args, kwargs = split_example(example_inputs)
            self.ahead_of_time_error = plan_ahead(self, self.binder.bind(args, kwargs))
        # (the first module of a process imports much of PyTorch: the full collection that
        # makes due runs here, not on a request)
        settle_imports(modules_before)

    @classmethod
    def from_prepared(cls, graph: Graph, options: StaticModuleOptions | None = None,
                      example_inputs: Any = None, origin: str = "a prepared graph"
                      ) -> StaticModule:
        """A module for a graph ``prepare(model, options)`` returned, without preparing it
        again (the graph is used as is, not copied); implementations are selected as usual."""
        return cls(PreparedGraph(graph, origin), options, example_inputs)

    def save(self, path: str | os.PathLike) -> None:
        """Write the prepared module to ``path`` (see ``static_runtime.runtime.serialize``);
        ``static_runtime.load(path)`` reads it back without preparing the model again."""
        from static_runtime.runtime.serialize import save

        save(self, path)

    def _program_ready(self, shape_free: tuple, program: Any) -> None:
        """A shape program is ready (on the builder's thread): generate the code its sizes'
        first calls run, and the code its layouts will run (and the plain generic code, for
        the sizes recorded before it), for the values its structure's largest layout
        places."""
        if self.options.executor != "codegen" or self._codes.hot is None:
            return  # (without hot signatures, each signature runs code of its own)
        self._codes.generic(frozenset(), program=program, ahead=True, kept=False)
        base = self._memory.largest.get(shape_free)
        checks = self.out_variant_checks
        refused = checks.refused_slots if checks is not None else frozenset()
        if base is not None:
            arena = frozenset(s.slot for s in (*base.specs, *base.outputs)) - refused
            self._codes.generic(arena, program=program, ahead=True)
            self._codes.generic(arena, ahead=True)  # for the sizes recorded before it

    def new_interpreter(self) -> Interpreter:
        """Fresh per-runtime executor state, for the executor the options chose."""
        if self.options.executor == "codegen":
            return CodegenExecutor(self.plan, self._memory, self._codes)
        return Interpreter(self.plan, self._memory)

    @property
    def code(self) -> str:
        """The generated Python source of the executor (for the most recent memory layout;
        before any call, for running with no arena)."""
        latest = self._codes.latest
        if latest is None:
            latest = self._codes.get(frozenset(), None)
        return latest.source

    def memory_plan(self) -> MemoryPlan:
        """The memory plan of the most recently planned input signature; where a shape
        program lays out that signature's structure, with the size symbols and each
        tensor's shape in them (``MemoryPlan.symbols``, ``.shapes``)."""
        item = self.layouts.most_recent_item()
        layout = item[1] if item is not None else None
        if layout is not None and self._memory.programs is not None:
            programs = self._memory.programs.get(structure(item[0]))
            if programs:
                names = {slot: v.name for v, slot in self.plan.slot_of.items()}
                shapes = {names[slot]: text for slot, text in programs[0].shapes.items()
                          if names[slot] in layout.plan}
                return dataclasses.replace(layout.plan, symbols=dict(programs[0].symbols),
                                           shapes=shapes)
        if layout is None and self._memory is not None and not (
                self.plan.managed_slots or self.plan.output_slots):
            return plan_best([])  # nothing to manage: an empty arena
        if layout is None:
            if self._memory is None:
                raise RuntimeError("memory planning is off (optimize_memory or "
                                   "enable_out_variant is False)")
            raise RuntimeError("no memory plan yet: call the module once, or build it with "
                               "example_inputs= to plan before the first call")
        return layout.plan

    # -- running
    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """Run the model; thread-safe: borrows a runtime from the pool for the call."""
        try:
            rt = self._idle.pop()
        except IndexError:
            rt = self._borrow_slow()
        try:
            return rt(*args, **kwargs)
        finally:
            self._idle.append(rt)
            if self._pool_waiting:
                self._wake_one()

    def run_async(self, args: tuple | list = (), kwargs: dict | None = None,
                  launcher: Any = None) -> torch.futures.Future:
        """Run the model on ``launcher`` (a callable taking a zero-argument function; default:
        the shared inter-op thread pool) with a runtime from the pool; returns a
        ``torch.futures.Future`` whose ``wait()``/``value()`` give the result or raise the
        call's exception. Forks inside the graph use the same launcher."""
        return _launch(self, args, kwargs, launcher)

    runAsync = run_async

    def _borrow_slow(self) -> StaticRuntime:
        """No idle runtime: make one, or (at ``max_runtimes``) wait for one to come back."""
        cond = self._pool_cond
        bound = self.options.max_runtimes
        with cond:
            # Counted as waiting before looking at the idle list: a runtime returned after
            # the look sees the count and notifies (it can only do so once we wait).
            self._pool_waiting += 1
            try:
                while True:
                    if self._idle:
                        return self._idle.pop()
                    if not bound or self._pool_created < bound:
                        self._pool_created += 1
                        break
                    cond.wait()
            finally:
                self._pool_waiting -= 1
        try:
            return StaticRuntime(self)
        except BaseException:
            with cond:
                self._pool_created -= 1
                cond.notify()
            raise

    def _wake_one(self) -> None:
        with self._pool_cond:
            self._pool_cond.notify()

    @property
    def pool_size(self) -> int:
        """How many runtimes the pool has made (idle or lent out to a call in flight)."""
        return self._pool_created

    def runtime(self) -> StaticRuntime:
        """The module's one cached runtime (not thread-safe; use one runtime per thread)."""
        if self._cached is None:
            with self._pool_cond:
                if self._cached is None:
                    self._cached = StaticRuntime(self)
        return self._cached

    def benchmark(self, args: tuple = (), kwargs: dict | None = None, warmup_runs: int = 10,
                  main_runs: int = 100) -> float:
        """Milliseconds per call of the cached runtime."""
        return metrics.benchmark(self.runtime(), tuple(args), dict(kwargs or {}),
                                 warmup_runs, main_runs)

    def benchmark_individual_ops(self, args: tuple = (), kwargs: dict | None = None,
                                 warmup_runs: int = 10,
                                 main_runs: int = 100) -> metrics.IndividualMetrics:
        return metrics.benchmark_individual_ops(self.runtime(), tuple(args), dict(kwargs or {}),
                                                warmup_runs, main_runs)

    # -- seeing it
    def tier_counts(self) -> dict[str, int]:
        """How many nodes (nested ones included, control flow excluded) got each tier."""
        counts = Counter(pn.tier.value for pn in self.plan.nodes()
                         if pn.control is Control.NONE)
        return {t.value: counts.get(t.value, 0) for t in Tier}

    def describe(self) -> str:
        """One line per node: kind, tier and the implementation chosen."""
        lines = []
        for pn in self.plan.nodes():
            tier = "control flow" if pn.control is not Control.NONE else pn.tier.value
            where = f"  # {pn.node.source}" if pn.node.source else ""
            label = pn.impl.label if pn.control is Control.NONE else ""
            # a fused region: what it compiled; a measured GEMM: its choices and timings
            status = getattr(pn.fn, "status", None)
            if callable(status):
                label += f" — {status()}"
            kept = " [managed]" if pn.managed else ""
            refusal = self._refusal(pn)
            if refusal is not None:
                kept = f" [runs functionally: out variant refused, {refusal.reason}]"
            lines.append(f"{pn.node.schema_name() or pn.kind:40s} {tier:12s} {label}{kept}{where}")
        counts = ", ".join(f"{n} {t}" for t, n in self.tier_counts().items())
        lines.append(f"tiers: {counts}")
        if self._memory is not None and self._memory.programs is not None:
            lines.extend(self._memory.programs.describe())
        if self.kernels is not None:
            lines.append(self.kernels.summary())
        checks = self.out_variant_checks
        if checks is not None and checks.refused:
            lines.append(f"out variants refused ({len(checks.refused)}), run functionally:")
            lines.extend(f"  {r}" for r in checks.refused.values())
        if self._memory is not None and self._memory.shared:
            names = {s: v.name for v, s in self.plan.slot_of.items()}
            lines.append("kept out of the arena (their storage was shared by a value the alias "
                         "analysis thought fresh): "
                         + ", ".join(sorted(names.get(s, str(s)) for s in self._memory.shared)))
        return "\n".join(lines)

    def _refusal(self, pn):
        checks = self.out_variant_checks
        if checks is None or not pn.managed:
            return None
        return checks.refused.get(pn.outputs[0])

    def __repr__(self) -> str:
        counts = ", ".join(f"{n} {t}" for t, n in self.tier_counts().items())
        return f"<StaticModule: {len(self.plan.nodes())} nodes ({counts})>"


class StaticRuntime:
    """Per-thread state for running a ``StaticModule``: not thread-safe; make one per thread
    (``StaticRuntime(mod)`` or ``rt.clone()``, both cheap)."""

    def __init__(self, module: StaticModule):
        self.module = module
        self.binder = module.binder
        self._unflatten = module.unflatten_outputs
        self._interp = module.new_interpreter()
        # The runtime is free while ``_token`` holds its one element. Claiming it is one
        # ``list.pop``, atomic under the GIL: of two threads entering at once exactly one
        # gets it (a bool checked then set could let both in), at ~0.05 µs a call where a
        # non-blocking ``Lock.acquire`` costs ~0.12 µs.
        self._token = [True]
        self._claim = self._token.pop
        self._unclaim = self._token.append
        self._enter, self._leave = CALLS.append, CALLS.pop
        self._threads = module.options.intra_op_threads
        self._run = self._run_with_threads if self._threads else self._interp.run

    def clone(self) -> StaticRuntime:
        return StaticRuntime(self.module)

    @property
    def busy(self) -> bool:
        """Whether a call is running on this runtime right now."""
        return not self._token

    @contextmanager
    def guard(self):
        """Marks the runtime busy and runs in inference mode; refuses concurrent use."""
        try:
            self._claim()
        except IndexError:
            self._refuse_reentry()
        guard = torch._C._InferenceMode(True)
        self._enter(None)  # (a call running: background builds give way, ``runtime/hot.py``)
        try:
            yield
        finally:
            self._leave()
            del guard
            self._unclaim(True)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        inputs = self.binder.bind(args, kwargs)
        # ``guard()`` written out: a generator-based context manager costs ~1 µs a call.
        try:
            self._claim()
        except IndexError:
            self._refuse_reentry()
        # (a caller already in inference mode spares the guard, ~0.35 µs)
        mode = None if _inference_mode_enabled() else torch._C._InferenceMode(True)
        self._enter(None)
        try:
            outputs = self._run(inputs)
        finally:
            self._leave()
            del mode
            self._unclaim(True)
        if self._unflatten is not None:
            return self._unflatten(outputs)
        return outputs[0] if len(outputs) == 1 else tuple(outputs)

    def _run_with_threads(self, inputs: list[Any]) -> list[Any]:
        """One run with the calling thread's intra-op thread count set to the option's."""
        before = torch.get_num_threads()
        if before == self._threads:
            return self._interp.run(inputs)
        torch.set_num_threads(self._threads)
        try:
            return self._interp.run(inputs)
        finally:
            torch.set_num_threads(before)

    @staticmethod
    def _refuse_reentry() -> None:
        raise RuntimeError(
            "this StaticRuntime is already running (used from two threads at once, or "
            "re-entered); give each thread its own runtime, or call the StaticModule")

    def run(self, args: tuple = (), kwargs: dict | None = None) -> Any:
        return self(*args, **(kwargs or {}))

    def run_async(self, args: tuple | list = (), kwargs: dict | None = None,
                  launcher: Any = None) -> torch.futures.Future:
        """Run on ``launcher`` (as ``StaticModule.run_async``) with this runtime; it is busy
        until the future completes."""
        return _launch(self, args, kwargs, launcher)

    runAsync = run_async

    def release_outputs(self) -> None:
        """With ``manage_output_tensors``: let the next call overwrite the outputs of the
        previous one even if they are still referenced (the caller is done with them)."""
        self._interp.release_outputs()

    deallocate_output_tensors = release_outputs


def _launch(call: Any, args: Any, kwargs: Any, launcher: Any) -> torch.futures.Future:
    """``call(*args, **kwargs)`` on ``launcher``, its result or exception in the future."""
    if not isinstance(args, (tuple, list)):
        raise TypeError(f"run_async takes the positional arguments as a tuple or list, got "
                        f"{type(args).__name__}")
    if kwargs is not None and not isinstance(kwargs, dict):
        raise TypeError(f"run_async takes the keyword arguments as a dict, got "
                        f"{type(kwargs).__name__}")
    args, kwargs, launcher = tuple(args), dict(kwargs or {}), check_launcher(launcher)
    future: torch.futures.Future = torch.futures.Future()

    def task() -> None:
        try:
            with using_launcher(launcher):
                result = call(*args, **kwargs)
        except BaseException as e:  # noqa: BLE001  (handed to the future)
            future.set_exception(e)
            return
        future.set_result(result)

    launcher(task)
    return future


def _describe_model(model: Any) -> str:
    if isinstance(model, PreparedGraph):
        return model.origin
    if isinstance(model, torch.jit.ScriptModule):
        return f"TorchScript module {model.original_name}"
    if isinstance(model, torch.jit.ScriptFunction):
        return f"TorchScript function {model.name}"
    if isinstance(model, (str, os.PathLike)):
        kind = "torch.export archive" if is_pt2(model) else "TorchScript archive"
        return f"{kind} {os.fspath(model)}"
    if isinstance(model, torch.export.ExportedProgram):
        return "torch.export program"
    if isinstance(model, torch.nn.Module):
        return f"nn.Module {type(model).__name__} (exported with torch.export)"
    return type(model).__name__


def _output_unflattener(graph: Graph):
    sig = graph.signature
    if not isinstance(sig, ExportSignature) or sig.out_is_leaf:
        return None
    spec = sig.out_spec
    children = spec.children()
    if spec.type in (tuple, list) and all(c.is_leaf() for c in children) \
            and len(children) == spec.num_leaves:
        # a flat tuple or list (most programs'): built directly — pytree's unflatten costs
        # ~1 µs a call (``two_tower`` from export 1.05 × its traced module's time for it)
        return tuple if spec.type is tuple else list
    return lambda outputs: pytree.tree_unflatten(outputs, spec)
