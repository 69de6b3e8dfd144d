"""``benchmark`` and ``benchmark_individual_ops``: whole-call and per-node timing.

``IndividualMetrics`` has the fields of PyTorch's own (times in milliseconds). Per-node
times are taken around each top-level node (a control-flow node's time includes its
blocks), averaged over the main runs.

The per-node clock is cheap by construction. Each iteration times only some top-level
nodes — every ``v``-th, for ``v = VARIANTS`` (16) variants in rotation, so each node is
timed once per ``v`` iterations — with a ``time.perf_counter_ns()`` reading before and after
each. A call then carries about ``2 × nodes / v`` readings instead of one per node: two
for a model of up to 16 nodes, and none in the iterations of such a model that time
nothing (they run the plain function). Under the generated-code executor the readings are lines of variants of the
generated function itself (``generate(..., timed=nodes)``), so the profile is of the code a
call runs, not of the reference interpreter; under ``executor="interpreter"`` they are taken
in the node loop. ``benchmark_individual_ops(main_runs=N)`` gives every node N samples (N ×
v iterations). ``measure_overhead`` reports what the readings cost: the same loop, whole
rotations, with and without them.
"""

from __future__ import annotations

import statistics
import time
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from static_runtime.ops.registry import Tier
from static_runtime.runtime.codegen import CodegenExecutor, stamp_layout

if TYPE_CHECKING:
    from static_runtime.runtime.module import StaticRuntime

_clock = time.perf_counter_ns


@dataclass
class IndividualMetrics:
    """PyTorch's ``IndividualMetrics`` (times in ms, per main run unless said otherwise).

    ``setup_time``: binding the arguments to the graph's inputs (PyTorch: ``set_inputs``).
    ``first_iter_time``: the first call on a fresh executor (records sizes and plans the
    arena if the module has not seen this input signature; generates code).
    ``memory_alloc_time``: making the call's managed memory current (the input signature
    check — in generated code, its first lines — and installing a layout when it changes). ``memory_dealloc_time``: releasing what the call
    still holds after its last node (generated code: the function's return, which drops its
    locals; interpreter: clearing the value array). ``output_dealloc_time``: dropping the
    outputs. ``total_time``: a whole iteration of the profiled loop, clock readings
    included. ``time_per_node[k]``: top-level node ``k``, with the release of values whose
    last use it is.
    """

    setup_time: float = 0.0
    memory_alloc_time: float = 0.0
    memory_dealloc_time: float = 0.0
    output_dealloc_time: float = 0.0
    first_iter_time: float = 0.0
    total_time: float = 0.0
    time_per_node: list[float] = field(default_factory=list)
    time_per_node_type: dict[str, float] = field(default_factory=dict)
    percent_per_node_type: dict[str, float] = field(default_factory=dict)
    instances_per_node_type: dict[str, int] = field(default_factory=dict)
    out_nodes: set[str] = field(default_factory=set)
    out_nodes_count: int = 0
    total_nodes_count: int = 0


@dataclass(frozen=True)
class Overhead:
    """What per-node timing costs, in the CPU time of the calling thread (``time.
    thread_time_ns``: time the thread spends preempted by other processes is not in it, so
    the figures hold on a busy machine). ``untimed_ms``: one iteration of the profiled loop
    (memory setup, the nodes, the return, finishing the outputs) without the clock
    readings, the fastest of many short samples (load from elsewhere only ever adds time);
    ``call_ms``: an ordinary call of the runtime, for reference, likewise. ``timed_ms``: the
    same iteration with the readings, ``untimed_ms`` × the median over the samples of
    timed ÷ untimed, each sample timing both back to back (so that both halves of a ratio
    see the same machine; the minimum of each on its own was seen to pick samples from
    different load phases on a busy machine, off by tens of per cent either way).
    ``fraction = timed / untimed - 1`` (0.03: the readings add 3 % to a call)."""

    untimed_ms: float
    timed_ms: float
    call_ms: float
    nodes: int
    samples: int

    @property
    def fraction(self) -> float:
        return self.timed_ms / self.untimed_ms - 1.0

    @property
    def ns_per_node(self) -> float:
        return (self.timed_ms - self.untimed_ms) * 1e6 / max(self.nodes, 1)


def _ms(ns: int) -> float:
    return ns / 1e6


def benchmark(runtime: StaticRuntime, args: tuple, kwargs: dict, warmup_runs: int,
              main_runs: int) -> float:
    """Milliseconds per call, averaged over ``main_runs`` after ``warmup_runs``."""
    if main_runs < 1:
        raise ValueError("main_runs must be at least 1")
    for _ in range(warmup_runs):
        runtime(*args, **kwargs)
    start = _clock()
    for _ in range(main_runs):
        runtime(*args, **kwargs)
    return _ms(_clock() - start) / main_runs


#: Variants of the timed code in a rotation: iteration ``j`` times the nodes ``k`` with
#: ``k % VARIANTS == j``, so a call carries two readings per ``VARIANTS`` nodes (about 9 ns a
#: node at ~70 ns a reading) and a graph of fewer nodes has untimed iterations in its
#: rotation (a 7-node graph: 7 of 16 iterations carry two readings each).
VARIANTS = 16


def node_subsets(n: int, variants: int = VARIANTS) -> list[frozenset[int]]:
    """The top-level nodes each profiled iteration times, in rotation: ``n`` nodes over
    ``variants`` iterations, node ``k`` in subset ``k % variants`` (so no two timed nodes
    are neighbours; subsets past the ``n``-th are empty)."""
    if variants < 1:
        raise ValueError("variants must be at least 1")
    return [frozenset(range(j, n, variants)) for j in range(variants)]


def _steps(nodes: tuple, timed: frozenset[int]) -> list[tuple[tuple, bool, bool]]:
    """The interpreter's steps for one variant: ``(nodes, clock before, clock after)``."""
    steps: list[tuple[tuple, bool, bool]] = []
    run: list = []
    for k, pn in enumerate(nodes):
        if k in timed:
            if run:
                steps.append((tuple(run), False, False))
                run = []
            steps.append(((pn,), k - 1 not in timed, True))
        else:
            run.append(pn)
    if run:
        steps.append((tuple(run), False, False))
    return steps


class _Loop:
    """Profiled iterations on an executor of its own (so the runtime's state is untouched).

    ``once(j)`` runs one iteration of variant ``j`` — timing the nodes of
    ``subsets[j]``, two clock readings each (generated code: lines of a variant of the
    function; interpreter: around the node in the loop) — and returns the outputs and
    ``(phases, {node: ns})``; ``phases`` are the readings ``(start, after memory setup,
    before the return, after the return, after finishing the outputs)``, taken in variant 0
    only (None in the others). ``once(None)`` runs an untimed iteration."""

    def __init__(self, runtime: StaticRuntime, args: tuple, kwargs: dict):
        module = runtime.module
        self.interp = module.new_interpreter()
        start = _clock()
        self.inputs = runtime.binder.bind(args, kwargs)
        self.setup_ns = _clock() - start
        self.nodes = self.interp.plan.block.nodes
        self.subsets = node_subsets(len(self.nodes))
        self.layouts = [stamp_layout(sub) for sub in self.subsets]
        #: per variant, the interpreter's steps: (nodes, read the clock before, after) — a
        #: timed node alone, each stretch of untimed nodes as one step (so an iteration makes
        #: as few extra calls as it has timed nodes); decided once, not per iteration
        self._steps = [_steps(self.nodes, sub) for sub in self.subsets]
        self.guard = runtime.guard
        self._timed_fns: list[Callable[..., Any]] = []
        self._plain_fn: Callable[..., Any] | None = None
        self._prepare = True

    def first(self) -> int:
        """The first call (plans memory, generates code); returns its ns."""
        start = _clock()
        self.interp.run(list(self.inputs))
        return _clock() - start

    def bind(self) -> None:
        """Bind the generated functions to the executor's current layout (after ``first``)."""
        interp = self.interp
        if isinstance(interp, CodegenExecutor):
            interp.prepare(self.inputs)
            self._plain_fn, self._prepare = interp.profiled_function(None)
            # a variant that times nothing runs the plain function (variant 0 always has its
            # readings: it takes the phases)
            self._timed_fns = [interp.profiled_function(sub)[0] if sub or j == 0 else None
                               for j, sub in enumerate(self.subsets)]

    def once(self, variant: int | None) -> tuple[Any, tuple | None]:
        """One iteration; for a timed variant, its raw readings: ``(phases, stamps)``, to
        be read by ``times`` after the loop (the timed path does no more than it must)."""
        interp, inputs = self.interp, self.inputs
        if self._plain_fn is not None:
            if variant is None:
                if self._prepare:
                    interp.prepare(inputs)
                return interp.finish(self._plain_fn(*inputs), inputs), None
            if variant:
                if self._prepare:
                    interp.prepare(inputs)
                fn = self._timed_fns[variant]
                if fn is None:
                    return interp.finish(self._plain_fn(*inputs), inputs), (None, ())
                outs, stamps = fn(*inputs)
                return interp.finish(outs, inputs), (None, stamps)
            t0 = _clock()
            if self._prepare:
                interp.prepare(inputs)
            t1 = _clock()
            outs, stamps = self._timed_fns[0](*inputs)
            t2 = _clock()
            outs = interp.finish(outs, inputs)
            t3 = _clock()
            # Variant 0 times node 0: its first reading ends the memory setup, which includes
            # the function's own first lines (the input signature check).
            setup_end = stamps[0] if self.subsets[0] else t1
            return outs, ((t0, setup_end, stamps[-1], t2, t3), stamps)
        if variant is None:
            interp.begin(inputs)
            interp.run_block(interp.plan.block)
            outs = interp.end(inputs)
            interp.clear()
            return outs, None
        run_nodes = interp.run_nodes
        stamps = []
        stamp = stamps.append
        t0 = _clock()
        interp.begin(inputs)
        t1 = _clock()
        for one, before, after in self._steps[variant]:
            if before:
                stamp(_clock())
            run_nodes(one)
            if after:
                stamp(_clock())
        stamp(_clock())
        outs = interp.end(inputs)
        interp.clear()
        t3 = _clock()
        # ``end`` finishes the outputs; counted with the release
        return outs, ((t0, t1, stamps[-1], t3, t3) if variant == 0 else None, stamps)

    def times(self, variant: int, stamps: tuple[int, ...]) -> dict[int, int]:
        """Node → ns from the readings of one iteration of ``variant``."""
        return {k: stamps[i + 1] - stamps[i] for k, i in self.layouts[variant]}


@dataclass
class NodeSamples:
    """The raw readings behind ``benchmark_individual_ops``: ``kinds[k]`` of top-level node
    ``k``; ``ns[k][r]`` its time in run ``r`` (one rotation, in which every node is timed
    once); per run the memory setup, the release after the last node and dropping the
    outputs (``alloc_ns``, ``dealloc_ns``, ``out_dealloc_ns``); ``total_ns`` the whole
    profiled loop, ``iterations`` how many iterations it made."""

    kinds: list[str]
    ns: list[list[int]]
    alloc_ns: list[int]
    dealloc_ns: list[int]
    out_dealloc_ns: list[int]
    total_ns: int
    iterations: int
    setup_ns: int
    first_ns: int

    def outside_ns(self, r: int) -> int:
        """What run ``r`` spent outside the nodes: memory setup (with the generated
        function's entry and signature check), the release and dropping the outputs."""
        return self.alloc_ns[r] + self.dealloc_ns[r] + self.out_dealloc_ns[r]


def node_samples(runtime: StaticRuntime, args: tuple, kwargs: dict, warmup_runs: int,
                 main_runs: int) -> NodeSamples:
    """Every top-level node's time in each of ``main_runs`` runs after ``warmup_runs`` (see
    the module docstring for how they are taken)."""
    if main_runs < 1:
        raise ValueError("main_runs must be at least 1")
    with runtime.guard():
        loop = _Loop(runtime, args, kwargs)
        first = loop.first()
        loop.bind()
        variants = len(loop.subsets)
        for _ in range(warmup_runs):
            for j in range(variants):
                loop.once(j)
        nodes = loop.nodes
        alloc, dealloc, out_dealloc = [], [], []
        total_start = _clock()
        readings = []
        for _ in range(main_runs):
            outs, (phases, stamps) = loop.once(0)
            s = _clock()
            del outs
            out_dealloc.append(_clock() - s)
            alloc.append(phases[1] - phases[0])
            dealloc.append(phases[3] - phases[2])
            readings.append((0, stamps))
            for j in range(1, variants):
                readings.append((j, loop.once(j)[1][1]))
        total = _clock() - total_start
    ns: list[list[int]] = [[] for _ in nodes]
    for j, stamps in readings:
        for k, t in loop.times(j, stamps).items():
            ns[k].append(t)
    return NodeSamples([pn.kind for pn in nodes], ns, alloc, dealloc, out_dealloc, total,
                       main_runs * variants, loop.setup_ns, first)


def benchmark_individual_ops(runtime: StaticRuntime, args: tuple, kwargs: dict,
                             warmup_runs: int, main_runs: int) -> IndividualMetrics:
    """Per-node times of ``main_runs`` samples of every node after ``warmup_runs`` (see the
    module docstring for how they are taken, ``IndividualMetrics`` for what each field
    is): the means of ``node_samples``."""
    samples = node_samples(runtime, args, kwargs, warmup_runs, main_runs)
    nodes = runtime.module.plan.block.nodes
    m = IndividualMetrics()
    m.setup_time = _ms(samples.setup_ns)
    m.first_iter_time = _ms(samples.first_ns)
    m.total_time = _ms(samples.total_ns) / samples.iterations
    m.memory_alloc_time = _ms(sum(samples.alloc_ns)) / main_runs
    m.memory_dealloc_time = _ms(sum(samples.dealloc_ns)) / main_runs
    m.output_dealloc_time = _ms(sum(samples.out_dealloc_ns)) / main_runs
    m.time_per_node = [_ms(sum(t)) / main_runs for t in samples.ns]
    by_type: dict[str, float] = defaultdict(float)
    counts: Counter[str] = Counter()
    for kind, t in zip(samples.kinds, m.time_per_node):
        by_type[kind] += t
        counts[kind] += 1
    m.time_per_node_type = dict(by_type)
    node_sum = sum(by_type.values()) or 1.0
    # (the kinds' sums, not the nodes' in their order: one kind is then exactly 100 %, where
    # the two orders of summing gave 100.00000000000001 % now and then)
    m.percent_per_node_type = {k: min(100.0, 100.0 * v / node_sum) for k, v in by_type.items()}
    m.instances_per_node_type = dict(counts)
    # As in PyTorch, the counts are of the top-level nodes timed above (a control-flow
    # node's blocks are inside its time), so total_nodes_count == len(time_per_node).
    out = [pn for pn in nodes if pn.tier is Tier.OUT]
    m.out_nodes = {pn.kind for pn in out}
    m.out_nodes_count = len(out)
    m.total_nodes_count = len(nodes)
    return m


def measure_overhead(runtime: StaticRuntime, args: tuple, kwargs: dict, *,
                     samples: int = 101, sample_ms: float = 2.0,
                     warmup_runs: int = 20, max_seconds: float | None = None) -> Overhead:
    """Time the profiled loop without and with its clock readings, and plain calls of the
    runtime, alternated: ``samples`` samples of each, a sample being as many iterations as
    fit in about ``sample_ms`` (many short samples, so that a burst of load from elsewhere
    spoils few of them; at least one whole rotation each) — or fewer, at least 5, when
    ``max_seconds`` have passed (a slow model); see ``Overhead``."""
    if samples < 1:
        raise ValueError("samples must be at least 1")
    with runtime.guard():
        loop = _Loop(runtime, args, kwargs)
        loop.first()
        loop.bind()
        variants = len(loop.subsets)
        for _ in range(warmup_runs):
            for j in range(variants):
                loop.once(j)
            loop.once(None)
        start = _clock()
        loop.once(None)
        runs = max(variants, int(sample_ms * 1e6 / max(_clock() - start, 1)))
        runs -= runs % variants  # whole rotations
    once = loop.once
    rotation = [j for _ in range(runs // variants) for j in range(variants)]
    cpu = time.thread_time_ns
    call = runtime.__call__
    untimed: list[float] = []
    ratios: list[float] = []
    calls: list[float] = []
    deadline = None if max_seconds is None else time.perf_counter() + max_seconds
    for k in range(samples):
        if deadline is not None and k >= 5 and time.perf_counter() > deadline:
            break
        ns = {}
        with runtime.guard():
            # which half goes first alternates, so a drift in load biases neither
            for timed in ((False, True) if k % 2 == 0 else (True, False)):
                start = cpu()
                if timed:
                    for j in rotation:
                        once(j)
                else:
                    for _ in range(runs):
                        once(None)
                ns[timed] = cpu() - start
        plain, with_clock = ns[False], ns[True]
        untimed.append(_ms(plain) / runs)
        ratios.append(with_clock / max(plain, 1))
        start = cpu()
        for _ in range(runs):
            call(*args, **kwargs)
        calls.append(_ms(cpu() - start) / runs)
    fastest = min(untimed)
    return Overhead(fastest, fastest * statistics.median(ratios), min(calls), len(loop.nodes),
                    len(ratios))


def format_metrics(m: IndividualMetrics) -> str:
    lines = [
        f"Setup time: {m.setup_time:.4f} ms",
        f"Memory allocation time: {m.memory_alloc_time:.4f} ms",
        f"Memory deallocation time: {m.memory_dealloc_time:.4f} ms",
        f"Outputs deallocation time: {m.output_dealloc_time:.4f} ms",
        f"First iter time: {m.first_iter_time:.4f} ms",
        f"Total time per iter: {m.total_time:.4f} ms",
        "Time per node type:",
    ]
    for kind, t in sorted(m.time_per_node_type.items(), key=lambda kv: -kv[1]):
        lines.append(f"  {t:10.4f} ms. {m.percent_per_node_type[kind]:6.2f}%. {kind} "
                     f"({m.instances_per_node_type[kind]} nodes)")
    lines.append(f"{m.out_nodes_count} out of {m.total_nodes_count} nodes have out variants")
    return "\n".join(lines)
