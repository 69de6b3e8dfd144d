"""The public API of DESIGN.md ("The public API"), as far as it exists.

``StaticModule`` construction and calls, the cached runtime and independent runtimes, the
prepared graph and ``prepare``, ``benchmark`` and ``benchmark_individual_ops`` (every field
of PyTorch's ``IndividualMetrics``, with values consistent with each other — never with the
clock), ``describe``/``tier_counts``, options validation, and autograd: results carry no
history, inputs that require grad are accepted.
"""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch
from differential import assert_same, script

import static_runtime as sr
from static_runtime.ir.graph import Graph
from static_runtime.models import MODELS

PLAIN = sr.StaticModuleOptions(enable_out_variant=False, optimize_memory=False)
#: ATen's kernels unmeasured: the MLP's three linears and three relus stay six nodes (measured,
#: each linear takes its relu along)
UNMEASURED = sr.StaticModuleOptions(kernel_choice="default")


def _mlp():
    return script(MODELS["mlp"].build())


def _x(batch: int = 2, seed: int = 0) -> torch.Tensor:
    return MODELS["mlp"].example_inputs(batch, seed=seed)[0]


def _with_defaults(x: torch.Tensor, n: int = 2, scale: float = 0.5) -> torch.Tensor:
    return torch.relu(x) * n * scale + 1


def _top_level_nodes(graph: Graph) -> list:
    return [n for n in graph.nodes if n.kind != "prim::Constant"]


# --------------------------------------------------------------------------- construction


def test_constructor_signature():
    scripted = _mlp()
    x = _x()
    expected = scripted(x)
    for mod in (sr.StaticModule(scripted),
                sr.StaticModule(scripted, sr.StaticModuleOptions()),
                sr.StaticModule(scripted, options=PLAIN, example_inputs=None),
                sr.StaticModule(model=scripted, options=None)):
        assert_same(mod(x), expected)
    assert isinstance(sr.StaticModule(scripted).options, sr.StaticModuleOptions)


def test_constructor_accepts_function_and_graph():
    fn = script(_with_defaults)
    x = torch.randn(3)
    assert_same(sr.StaticModule(fn)(x), fn(x))
    assert_same(sr.StaticModule(fn.graph)(x, 2, 0.5), fn(x))


def test_constructor_from_prepared_graph():
    mod = sr.StaticModule(_mlp())
    again = sr.StaticModule(mod.graph)
    x = _x(3)
    assert_same(again(x), mod(x))


def test_options_must_be_options():
    with pytest.raises(TypeError, match="StaticModuleOptions"):
        sr.StaticModule(_mlp(), options={"enable_out_variant": False})


_WRONG_VALUES = {"bool": [1, 0, "yes", None], "int": [True, 2.0, "8", None],
                 "str": [1, True, None], "str | None": [1, True, 0.5]}


@pytest.mark.parametrize("field,value", [
    (f.name, v) for f in dataclasses.fields(sr.StaticModuleOptions) for v in _WRONG_VALUES[f.type]])
def test_option_values_must_have_their_type(field, value):
    with pytest.raises(TypeError, match=field):
        sr.StaticModuleOptions(**{field: value})


def test_option_values_must_be_in_range():
    with pytest.raises(ValueError, match="plan_cache_size"):
        sr.StaticModuleOptions(plan_cache_size=0)
    with pytest.raises(ValueError, match="memory_planner"):
        sr.StaticModuleOptions(memory_planner="first_fit")
    with pytest.raises(ValueError, match="executor"):
        sr.StaticModuleOptions(executor="jit")
    with pytest.raises(ValueError, match="fusion_compiler"):
        sr.StaticModuleOptions(fusion_compiler="nvfuser")


def test_unknown_option_is_refused():
    with pytest.raises(TypeError):
        sr.StaticModuleOptions(no_such_option=True)


def test_options_are_immutable():
    opts = sr.StaticModuleOptions()
    with pytest.raises(dataclasses.FrozenInstanceError):
        opts.enable_out_variant = False  # type: ignore[misc]


# --------------------------------------------------------------------------- calling


def test_call_with_args_and_kwargs():
    fn = script(_with_defaults)
    mod = sr.StaticModule(fn)
    x = torch.randn(4)
    assert_same(mod(x), fn(x))
    assert_same(mod(x, 3), fn(x, 3))
    assert_same(mod(x, scale=2.0), fn(x, scale=2.0))
    assert_same(mod(scale=2.0, n=5, x=x), fn(x, 5, 2.0))
    assert_same(mod(x, 3, 1), fn(x, 3, 1.0)), "an int is accepted for a float"


def test_runtime_is_cached():
    mod = sr.StaticModule(_mlp())
    rt = mod.runtime()
    assert rt is mod.runtime()
    assert isinstance(rt, sr.StaticRuntime) and rt.module is mod


def test_independent_runtimes_give_equal_results():
    scripted = _mlp()
    mod = sr.StaticModule(scripted)
    rt1 = sr.StaticRuntime(mod)
    rt2 = rt1.clone()
    rt3 = mod.runtime()
    assert len({id(rt1), id(rt2), id(rt3)}) == 3
    assert rt2.module is mod and rt1.module is mod
    x, y = _x(2), _x(5, seed=1)
    held = [(rt1(x), x), (rt2(y), y), (rt3(x), x), (rt1.run((y,)), y), (rt2(x), x),
            (mod(y), y), (rt3.run((x,), {}), x)]
    for out, inp in held:  # none overwrote another's result
        assert_same(out, scripted(inp))


def test_runtimes_in_threads():
    from concurrent.futures import ThreadPoolExecutor

    scripted = _mlp()
    mod = sr.StaticModule(scripted)
    inputs = [_x(1 + k % 3, seed=k) for k in range(8)]
    expected = [scripted(x) for x in inputs]

    def work(k: int) -> None:
        rt = mod.runtime() if k == 0 else sr.StaticRuntime(mod)
        for _ in range(5):
            for x, e in zip(inputs, expected):
                assert_same(rt(x), e)
                assert_same(mod(x), e)

    with ThreadPoolExecutor(3) as pool:
        for future in [pool.submit(work, k) for k in range(3)]:
            future.result()  # re-raises a failure in the thread


def test_multiple_outputs_are_a_tuple():
    def f(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return x + 1, x * 2

    fn = script(f)
    x = torch.randn(3)
    assert_same(sr.StaticModule(fn)(x), fn(x))


# --------------------------------------------------------------------------- the graph


def test_graph_prints_canonical_text():
    mod = sr.StaticModule(_mlp())
    text = str(mod.graph)
    assert text.startswith("graph(")
    assert "return" in text and "linear" in text
    assert isinstance(mod.graph, Graph)


def test_prepare_returns_the_prepared_graph():
    scripted = _mlp()
    for opts in (None, sr.StaticModuleOptions(), PLAIN):
        graph = sr.prepare(scripted, opts)
        assert isinstance(graph, Graph)
        assert str(graph).startswith("graph(")
        mod = sr.StaticModule(scripted, options=opts)
        assert [n.kind for n in graph.walk()] == [n.kind for n in mod.graph.walk()]
        assert len(graph.inputs) == len(mod.graph.inputs) == 1


def test_prepare_without_passes_keeps_more_nodes():
    fn = script(_with_defaults)
    no_passes = sr.StaticModuleOptions(**{name: False for name in (
        "constant_propagation", "eliminate_dead_code", "remove_noops", "variadic_cat_stack",
        "merge_tuple_unpacks", "specialize_alpha", "functionalize")})
    assert len(list(sr.prepare(fn, no_passes).walk())) >= len(list(sr.prepare(fn).walk()))


# --------------------------------------------------------------------------- benchmarks


def test_benchmark_returns_positive_ms():
    mod = sr.StaticModule(_mlp())
    x = _x()
    ms = mod.benchmark((x,), {}, 2, 5)
    assert isinstance(ms, float) and ms > 0 and math.isfinite(ms)
    assert mod.benchmark([x], None, warmup_runs=0, main_runs=1) > 0
    with pytest.raises(ValueError):
        mod.benchmark((x,), {}, 0, 0)


def test_benchmark_with_kwargs():
    mod = sr.StaticModule(script(_with_defaults))
    assert mod.benchmark((torch.randn(3),), {"scale": 2.0}, 1, 3) > 0


PYTORCH_FIELDS = {
    "setup_time": float, "memory_alloc_time": float, "memory_dealloc_time": float,
    "output_dealloc_time": float, "first_iter_time": float, "total_time": float,
    "time_per_node": list, "time_per_node_type": dict, "percent_per_node_type": dict,
    "instances_per_node_type": dict, "out_nodes": set, "out_nodes_count": int,
    "total_nodes_count": int,
}


def _check_metrics(m: sr.IndividualMetrics, mod: sr.StaticModule) -> None:
    assert isinstance(m, sr.IndividualMetrics)
    for name, kind in PYTORCH_FIELDS.items():
        assert isinstance(getattr(m, name), kind), f"{name}: {type(getattr(m, name))}"
    for name in ("setup_time", "memory_alloc_time", "memory_dealloc_time",
                 "output_dealloc_time"):
        assert getattr(m, name) >= 0, name
    assert m.first_iter_time > 0 and m.total_time > 0

    top = _top_level_nodes(mod.graph)
    kinds = [n.kind for n in top]
    # one time per top-level node, as PyTorch's benchmark_individual_ops
    assert len(m.time_per_node) == len(top) == m.total_nodes_count
    assert all(t >= 0 for t in m.time_per_node)
    assert m.instances_per_node_type == {k: kinds.count(k) for k in set(kinds)}
    assert set(m.time_per_node_type) == set(m.percent_per_node_type) == set(kinds)
    for kind in set(kinds):
        per_kind = sum(t for t, k in zip(m.time_per_node, kinds) if k == kind)
        assert m.time_per_node_type[kind] == pytest.approx(per_kind, rel=1e-9, abs=1e-12)
    assert sum(m.percent_per_node_type.values()) == pytest.approx(100.0, abs=1e-6)
    assert all(0 <= p <= 100 for p in m.percent_per_node_type.values())
    # Nodes are timed in a rotation, in different iterations than each other, so the
    # per-node means add up to total_time only on average (tests/runtime/test_metrics.py
    # checks the averaging exactly, with a fake clock).
    assert m.total_time > 0
    assert m.out_nodes <= set(kinds)
    assert 0 <= m.out_nodes_count <= m.total_nodes_count
    assert (m.out_nodes_count == 0) == (not m.out_nodes)


def test_benchmark_individual_ops_mlp():
    mod = sr.StaticModule(_mlp())
    m = mod.benchmark_individual_ops((_x(),), {}, 2, 3)
    _check_metrics(m, mod)
    # no control flow: the top-level nodes are all the nodes
    assert m.out_nodes_count == mod.tier_counts()["out variant"] > 0
    assert "static_runtime::linear_pointwise" in m.out_nodes  # (each linear with its relu)


def test_benchmark_individual_ops_without_out_variants():
    mod = sr.StaticModule(_mlp(), options=PLAIN)
    m = mod.benchmark_individual_ops((_x(),), {}, 1, 2)
    _check_metrics(m, mod)
    assert m.out_nodes_count == 0 and m.out_nodes == set()


@pytest.mark.parametrize("name", ["control_flow", "dlrm"])
def test_benchmark_individual_ops_with_nested_blocks(name):
    """Per-node times are for top-level nodes; a control-flow node's time includes its
    blocks, and the node counts are of the same top-level nodes (as in PyTorch)."""
    spec = MODELS[name]
    mod = sr.StaticModule(script(spec.build()))
    m = mod.benchmark_individual_ops(spec.example_inputs(2), {}, 1, 2)
    _check_metrics(m, mod)
    assert "prim::If" in m.instances_per_node_type or "prim::Loop" in m.instances_per_node_type


def test_benchmark_individual_ops_leaves_runtime_usable():
    scripted = _mlp()
    mod = sr.StaticModule(scripted)
    x = _x(3)
    before = mod.runtime()(x)
    mod.benchmark_individual_ops((x,), {}, 1, 2)
    assert_same(mod.runtime()(_x(3, seed=4)), scripted(_x(3, seed=4)))
    assert_same(before, scripted(x))


# --------------------------------------------------------------------------- describing


def test_tier_counts_and_describe():
    mod = sr.StaticModule(_mlp(), UNMEASURED)
    counts = mod.tier_counts()
    assert set(counts) == {t.value for t in sr.Tier}
    assert counts["out variant"] >= 3 and sum(counts.values()) == 6
    text = mod.describe()
    lines = text.splitlines()
    assert len(lines) == 7
    assert sum("aten::linear" in line for line in lines) == 3
    assert sum("aten::relu" in line for line in lines) == 3
    assert all("out variant" in line for line in lines if line.startswith("aten::linear"))
    assert lines[-1] == "tiers: " + ", ".join(f"{n} {t}" for t, n in counts.items())
    assert "StaticModule" in repr(mod) and "6 nodes" in repr(mod)


def test_tier_counts_without_out_variants():
    counts = sr.StaticModule(_mlp(), options=PLAIN).tier_counts()
    assert counts["out variant"] == 0 and sum(counts.values()) == 3  # linear + relu, fused


def test_describe_shows_every_tier_and_control_flow():
    spec = MODELS["control_flow"]
    mod = sr.StaticModule(script(spec.build()))
    text = mod.describe()
    assert "control flow" in text
    counts = mod.tier_counts()
    assert sum(counts.values()) == sum(1 for n in mod.graph.walk() if n.kind not in (
        "prim::Constant", "prim::If", "prim::Loop"))
    tiers = next(line for line in text.splitlines() if line.startswith("tiers: "))
    for tier, n in counts.items():
        assert f"{n} {tier}" in tiers


# --------------------------------------------------------------------------- autograd


class _Affine(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(4, 4)

    def forward(self, x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.linear(x)) * w


@pytest.mark.parametrize("opts", [sr.StaticModuleOptions(), PLAIN], ids=["default", "plain"])
def test_results_carry_no_autograd_history(opts):
    scripted = script(_Affine())
    mod = sr.StaticModule(scripted, options=opts)
    x = torch.randn(3, 4, requires_grad=True)
    w = torch.nn.Parameter(torch.randn(4))
    for _ in range(2):
        out = mod(x, w)
        assert not out.requires_grad and out.grad_fn is None
    expected = scripted(x, w)
    assert expected.requires_grad, "the interpreter records history; we must not"
    assert_same(out, expected.detach())


def test_inputs_requiring_grad_are_accepted_and_left_alone():
    scripted = _mlp()
    mod = sr.StaticModule(scripted)
    leaf = _x(2).requires_grad_()
    non_leaf = leaf * 1.0
    for x in (leaf, non_leaf):
        snapshot = x.detach().clone()
        out = mod(x)
        assert_same(out, scripted(x).detach())
        assert x.requires_grad and torch.equal(x.detach(), snapshot)
    assert non_leaf.grad_fn is not None
    non_leaf.sum().backward()  # the caller's graph still works
    assert leaf.grad is not None


def test_no_grad_and_inference_mode_callers():
    scripted = _mlp()
    mod = sr.StaticModule(scripted)
    x = _x(2)
    with torch.no_grad():
        a = mod(x)
    with torch.inference_mode():
        b = mod(x)
    assert_same(a, scripted(x).detach())
    assert_same(b, a)
    assert torch.is_grad_enabled()


def test_out_variants_off_with_variadic_pass_on():
    def f(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return torch.cat([a, b], 0) + torch.stack([a, a]).sum()

    fn = script(f)
    mod = sr.StaticModule(fn, options=sr.StaticModuleOptions(enable_out_variant=False))
    a, b = torch.randn(2), torch.randn(3)
    assert_same(mod(a, b), fn(a, b))


class _WritesItsArguments(torch.nn.Module):
    """In-place updates of arguments, and a training-mode batch norm updating the running
    statistics it is given: the model's own writes."""

    def forward(self, x, mean, var, y):
        x.add_(1)
        torch.relu_(y)
        return torch.nn.functional.batch_norm(x, mean, var, training=True) * 2 + y


def test_inputs_written_exactly_where_the_model_writes_them():
    """The README's rule: as under TorchScript, a graph that writes an argument writes it;
    nothing the runtime adds writes one."""
    scripted = torch.jit.script(_WritesItsArguments())
    mod = sr.StaticModule(torch.jit.script(_WritesItsArguments()))
    g = torch.Generator().manual_seed(0)
    for rows in (8, 8, 3):
        args = [torch.randn(rows, 4, generator=g), torch.zeros(4), torch.ones(4),
                torch.randn(rows, 4, generator=g)]
        theirs = [a.clone() for a in args]
        expected = scripted(*theirs)
        torch.testing.assert_close(mod(*args), expected)
        for ours, ts in zip(args, theirs):
            torch.testing.assert_close(ours, ts)  # written alike: x, y and the statistics
        assert not torch.equal(args[1], torch.zeros(4))
