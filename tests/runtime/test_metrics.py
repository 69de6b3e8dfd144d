"""The profiler: generated code with clock readings runs the same computation, one reading
per top-level node; ``benchmark_individual_ops`` under both executors; ``measure_overhead``;
the per-pass observer ``inspect`` uses. Figures are checked for consistency, never against
the clock."""

from __future__ import annotations

import pytest
import torch
from differential import assert_same, script

import static_runtime as sr
from static_runtime.models import MODELS
from static_runtime.ops.registry import evaluator
from static_runtime.passes.pipeline import PASS_ORDER, run_passes
from static_runtime.runtime.codegen import stamp_layout
from static_runtime.runtime.metrics import VARIANTS, _Loop, measure_overhead, node_subsets


@pytest.mark.parametrize("name", ["mlp", "control_flow", "dlrm"])
def test_timed_generated_code_computes_the_same(name):
    spec = MODELS[name]
    scripted = script(spec.build())
    mod = sr.StaticModule(scripted)
    inputs = spec.example_inputs(2)
    rt = mod.runtime()
    rt(*inputs)
    with rt.guard():
        loop = _Loop(rt, inputs, {})
        loop.first()
        loop.bind()
        plain, _ = loop.once(None)
        results = [loop.once(j) for j in range(len(loop.subsets))]
    expected = scripted(*inputs)
    n = len(mod.plan.block.nodes)
    assert_same(plain[0], expected)
    timed_nodes = []
    for j, (outs, (phases, stamps)) in enumerate(results):
        times = loop.times(j, stamps)
        assert_same(outs[0], expected)
        assert set(times) == loop.subsets[j]
        assert all(t >= 0 for t in times.values())
        timed_nodes += list(times)
        assert (phases is not None) == (j == 0)
    assert sorted(timed_nodes) == list(range(n)), "every node is timed once per rotation"
    t0, setup_end, before_return, after_return, finished = results[0][1][0]
    assert t0 <= setup_end <= before_return <= after_return <= finished
    assert "_clock()" not in mod.code, "the runtime's own code carries no clock readings"


def test_each_call_times_few_nodes():
    for n in (0, 1, 5, 8, 9, 76):
        subsets = node_subsets(n)
        assert sorted(k for s in subsets for k in s) == list(range(n))
        assert len(subsets) == VARIANTS
        assert max(len(s) for s in subsets) == -(-n // VARIANTS)
        assert all(k - 1 not in s for s in subsets for k in s), "no timed neighbours"
    # readings: one before and one after each timed node, shared between neighbours
    assert stamp_layout(frozenset({0, 8, 16})) == [(0, 0), (8, 2), (16, 4)]
    assert stamp_layout(frozenset({2, 3, 4})) == [(2, 0), (3, 1), (4, 2)]
    assert stamp_layout(frozenset()) == []


def test_timed_variant_source_has_two_readings_per_timed_node():
    spec = MODELS["dlrm"]
    mod = sr.StaticModule(script(spec.build()))
    rt = mod.runtime()
    inputs = spec.example_inputs(1)
    rt(*inputs)
    n = len(mod.plan.block.nodes)
    with rt.guard():
        loop = _Loop(rt, inputs, {})
        loop.first()
        loop.bind()
        loop.interp.profiled_function(loop.subsets[1])
        source = loop.interp._code.source
    # two per timed node (no two are neighbours with 16 variants of 76 nodes), one before
    # the return
    assert source.count("_clock()") == 2 * len(loop.subsets[1]) + 1
    assert len(loop.subsets[1]) <= -(-n // VARIANTS)


@pytest.mark.parametrize("executor", ["codegen", "interpreter"])
def test_individual_ops_per_executor(executor):
    spec = MODELS["control_flow"]
    mod = sr.StaticModule(script(spec.build()),
                          options=sr.StaticModuleOptions(executor=executor))
    m = mod.benchmark_individual_ops(spec.example_inputs(3), {}, 1, 5)
    assert len(m.time_per_node) == len(mod.plan.block.nodes) == m.total_nodes_count
    assert all(t >= 0 for t in m.time_per_node)
    assert m.total_time > 0 and sum(m.time_per_node) > 0


def test_rotation_gives_every_node_its_samples(monkeypatch):
    """With a clock that advances 1 µs per reading, every node of the interpreter's
    profile is timed at exactly 1 µs: each sampled once per rotation, averaged over the
    main runs (not over iterations)."""
    import itertools

    from static_runtime.runtime import metrics

    spec = MODELS["dlrm"]  # 76 top-level nodes: 16 variants
    mod = sr.StaticModule(script(spec.build()),
                          options=sr.StaticModuleOptions(executor="interpreter"))
    ticks = itertools.count(0, 1000)
    monkeypatch.setattr(metrics, "_clock", lambda: next(ticks))
    m = mod.benchmark_individual_ops(spec.example_inputs(1), {}, 1, 3)
    assert m.time_per_node == [0.001] * len(mod.plan.block.nodes)
    assert m.memory_alloc_time == pytest.approx(0.001)
    assert m.first_iter_time > 0 and m.setup_time >= 0


def test_measure_overhead_fields():
    spec = MODELS["mlp"]
    mod = sr.StaticModule(script(spec.build()))
    o = measure_overhead(mod.runtime(), spec.example_inputs(1), {}, samples=3, sample_ms=0.2,
                         warmup_runs=1)
    assert o.untimed_ms > 0 and o.timed_ms > 0 and o.call_ms > 0
    assert o.nodes == len(mod.plan.block.nodes) and o.samples == 3
    assert o.fraction == pytest.approx(o.timed_ms / o.untimed_ms - 1)
    with pytest.raises(ValueError):
        measure_overhead(mod.runtime(), spec.example_inputs(1), {}, samples=0)


def test_pass_observer_sees_every_pass_that_ran():
    from static_runtime.frontend import import_model

    opts = sr.StaticModuleOptions(constant_propagation=False)
    enabled = opts.passes_enabled()
    seen = []
    graph = import_model(script(MODELS["mlp"].build()))
    changed = run_passes(graph, enabled, evaluate=evaluator,
                         observer=lambda name, did, g: seen.append((name, did, len(g.nodes))))
    assert [s[0] for s in seen] == [p for p in PASS_ORDER if enabled[p]]
    assert [s[0] for s in seen if s[1]] == changed
    assert seen[-1][2] == len(graph.nodes)
    # the observer does not change what preparation produces
    plain = import_model(script(MODELS["mlp"].build()))
    run_passes(plain, enabled, evaluate=evaluator)
    assert str(plain) == str(graph)


def test_profile_leaves_inputs_unchanged():
    spec = MODELS["mlp"]
    mod = sr.StaticModule(script(spec.build()))
    (x,) = spec.example_inputs(2)
    before = x.clone()
    mod.benchmark_individual_ops((x,), {}, 1, 2)
    measure_overhead(mod.runtime(), (x,), {}, samples=1, sample_ms=0.1, warmup_runs=0)
    assert torch.equal(x, before)
