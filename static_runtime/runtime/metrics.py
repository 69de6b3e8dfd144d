"""``benchmark`` and ``benchmark_individual_ops``: whole-call and per-node timing.

``IndividualMetrics`` has the fields of PyTorch's own (times in milliseconds). Per-node
times are taken around each top-level node (a control-flow node's time includes its
blocks), averaged over the main runs.
"""

from __future__ import annotations

import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from static_runtime.ops.registry import Tier

if TYPE_CHECKING:
    from static_runtime.runtime.module import StaticRuntime


@dataclass
class IndividualMetrics:
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


def _ms(ns: int) -> float:
    return ns / 1e6


def benchmark(runtime: StaticRuntime, args: tuple, kwargs: dict, warmup_runs: int,
              main_runs: int) -> float:
    """Milliseconds per call, averaged over ``main_runs`` after ``warmup_runs``."""
    if main_runs < 1:
        raise ValueError("main_runs must be at least 1")
    for _ in range(warmup_runs):
        runtime(*args, **kwargs)
    start = time.perf_counter_ns()
    for _ in range(main_runs):
        runtime(*args, **kwargs)
    return _ms(time.perf_counter_ns() - start) / main_runs


def benchmark_individual_ops(runtime: StaticRuntime, args: tuple, kwargs: dict,
                             warmup_runs: int, main_runs: int) -> IndividualMetrics:
    if main_runs < 1:
        raise ValueError("main_runs must be at least 1")
    m = IndividualMetrics()
    t0 = time.perf_counter_ns()
    interp = runtime.module.new_interpreter()
    m.setup_time = _ms(time.perf_counter_ns() - t0)
    inputs = runtime.binder.bind(args, kwargs)
    nodes = interp.plan.block.nodes

    with runtime.guard():
        t0 = time.perf_counter_ns()
        outputs = interp.run(list(inputs))
        m.first_iter_time = _ms(time.perf_counter_ns() - t0)
        del outputs
        for _ in range(warmup_runs):
            interp.run(list(inputs))

        per_node = [0] * len(nodes)
        alloc = dealloc = out_dealloc = 0
        total_start = time.perf_counter_ns()
        for _ in range(main_runs):
            s = time.perf_counter_ns()
            interp.begin(inputs)
            alloc += time.perf_counter_ns() - s
            for k, pn in enumerate(nodes):
                s = time.perf_counter_ns()
                interp.run_nodes((pn,))
                per_node[k] += time.perf_counter_ns() - s
            outs = interp.end(inputs)
            s = time.perf_counter_ns()
            interp.clear()
            dealloc += time.perf_counter_ns() - s
            s = time.perf_counter_ns()
            del outs
            out_dealloc += time.perf_counter_ns() - s
        m.total_time = _ms(time.perf_counter_ns() - total_start) / main_runs

    m.memory_alloc_time = _ms(alloc) / main_runs
    m.memory_dealloc_time = _ms(dealloc) / main_runs
    m.output_dealloc_time = _ms(out_dealloc) / main_runs
    m.time_per_node = [_ms(t) / main_runs for t in per_node]
    by_type: dict[str, float] = defaultdict(float)
    counts: Counter[str] = Counter()
    for pn, t in zip(nodes, m.time_per_node):
        by_type[pn.kind] += t
        counts[pn.kind] += 1
    m.time_per_node_type = dict(by_type)
    node_sum = sum(m.time_per_node) or 1.0
    m.percent_per_node_type = {k: 100.0 * v / node_sum for k, v in by_type.items()}
    m.instances_per_node_type = dict(counts)
    # As in PyTorch, the counts are of the top-level nodes timed above (a control-flow
    # node's blocks are inside its time), so total_nodes_count == len(time_per_node).
    out = [pn for pn in nodes if pn.tier is Tier.OUT]
    m.out_nodes = {pn.kind for pn in out}
    m.out_nodes_count = len(out)
    m.total_nodes_count = len(nodes)
    return m


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
