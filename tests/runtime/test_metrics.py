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
from static_runtime.passes.pipeline import PASS_ORDER, run_passes
from static_runtime.runtime.metrics import _Loop, measure_overhead


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
        plain, _ = loop.once(False)
        timed, stamps = loop.once(True)
    expected = scripted(*inputs)
    n = len(mod.plan.block.nodes)
    # start, after memory setup, one per top-level node, after the return, after finishing
    assert len(stamps) == n + 4
    assert list(stamps) == sorted(stamps)
    assert_same(timed[0], expected)
    assert_same(plain[0], expected)
    assert "_clock()" not in mod.code, "the runtime's own code carries no clock readings"


@pytest.mark.parametrize("executor", ["codegen", "interpreter"])
def test_individual_ops_per_executor(executor):
    spec = MODELS["control_flow"]
    mod = sr.StaticModule(script(spec.build()),
                          options=sr.StaticModuleOptions(executor=executor))
    m = mod.benchmark_individual_ops(spec.example_inputs(3), {}, 1, 3)
    assert len(m.time_per_node) == len(mod.plan.block.nodes) == m.total_nodes_count
    assert all(t >= 0 for t in m.time_per_node)
    assert m.total_time >= sum(m.time_per_node) + m.memory_alloc_time
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
    changed = run_passes(graph, enabled,
                         observer=lambda name, did, g: seen.append((name, did, len(g.nodes))))
    assert [s[0] for s in seen] == [p for p in PASS_ORDER if enabled[p]]
    assert [s[0] for s in seen if s[1]] == changed
    assert seen[-1][2] == len(graph.nodes)
    # the observer does not change what preparation produces
    plain = import_model(script(MODELS["mlp"].build()))
    run_passes(plain, enabled)
    assert str(plain) == str(graph)


def test_profile_leaves_inputs_unchanged():
    spec = MODELS["mlp"]
    mod = sr.StaticModule(script(spec.build()))
    (x,) = spec.example_inputs(2)
    before = x.clone()
    mod.benchmark_individual_ops((x,), {}, 1, 2)
    measure_overhead(mod.runtime(), (x,), {}, samples=1, sample_ms=0.1, warmup_runs=0)
    assert torch.equal(x, before)
