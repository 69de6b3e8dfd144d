"""``static_runtime.compare.ops``: kinds lined up after the documented mapping, instance
counts equal to what each side's graph holds (counted here from the graphs themselves),
costs that add up, and the fallbacks where PyTorch's C++ Static Runtime cannot be profiled.
No figure is checked against the clock."""

from __future__ import annotations

from collections import Counter

import pytest
import torch
from differential import script

import static_runtime as sr
from static_runtime.compare import ops as co
from static_runtime.models import MODELS


class Known(torch.nn.Module):
    """linear, relu (ours: relu_), reshape, to, cat of a list (both: VarConcat), add with
    alpha 1 (ours: static_runtime::add), mul, sub, flatten, sum, a tuple."""

    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(8, 8)

    def forward(self, x: torch.Tensor):
        y = torch.relu(self.lin(x))
        z = y.reshape(-1, 4).to(torch.float64)
        w = torch.cat([z, z], 0) + 1.0
        a, b = (w * 2, w - 1)
        return w.flatten(), a.sum() + b.sum()


class Steps(torch.nn.Module):
    """An int argument: the C++ runtime's Python benchmark_individual_ops takes tensors only."""

    def forward(self, x: torch.Tensor, n: int) -> torch.Tensor:
        for _ in range(n):
            x = torch.tanh(x)
        return x


def _profile(runtime: str, us: dict[str, float], n: dict[str, int],
             outside: float = 0.0) -> co.KindProfile:
    return co.KindProfile(runtime, us, n, outside, "test")


def test_kind_rows_maps_kinds_and_costs_add_up():
    ours = _profile("ours", {"static_runtime::add": 6.0, "aten::relu_": 2.0, "aten::to": 3.0,
                             "prim::VarConcat": 1.0, "static_runtime::attention": 10.0},
                    {"static_runtime::add": 3, "aten::relu_": 2, "aten::to": 1,
                     "prim::VarConcat": 1, "static_runtime::attention": 1}, outside=4.0)
    cpp = _profile("cpp", {"aten::add": 3.0, "aten::relu": 2.0,
                           "static_runtime::to_maybe_copy_out": 0.5,
                           "static_runtime::select_tensor": 0.1,
                           "static_runtime::reshape_copy": 0.7, "prim::VarConcat": 1.0,
                           "aten::matmul": 4.0, "aten::softmax": 2.0},
                   {"aten::add": 3, "aten::relu": 2, "static_runtime::to_maybe_copy_out": 1,
                    "static_runtime::select_tensor": 1, "static_runtime::reshape_copy": 1,
                    "prim::VarConcat": 1, "aten::matmul": 2, "aten::softmax": 1}, outside=1.0)
    rows = co.kind_rows(ours, cpp)
    by = {r.kind: r for r in rows}
    assert rows[-1].kind == co.OUTSIDE
    assert by[co.OUTSIDE].cost_us == pytest.approx(3.0)
    add = by["aten::add"]
    assert (add.ours_instances, add.other_instances) == (3, 3)
    assert add.ours_kinds == ("static_runtime::add",) and add.other_kinds == ("aten::add",)
    assert add.diff_us_per_instance == pytest.approx(1.0)
    assert add.cost_us == pytest.approx(3.0)
    # to_maybe_copy_out + select_tensor: one `to`, both times
    to = by["aten::to"]
    assert to.other_instances == 1 and to.other_us == pytest.approx(0.6)
    assert by["aten::relu"].cost_us == pytest.approx(0.0)
    # one-sided rows keep the other side empty
    reshape = by["aten::reshape"]
    assert reshape.ours_instances is None and reshape.ours_us_per_instance is None
    assert reshape.diff_us_per_instance is None and reshape.cost_us == pytest.approx(-0.7)
    attention = by["static_runtime::attention"]
    assert attention.other_us is None and "softmax" in attention.stands_for
    costs = [r.cost_us for r in rows[:-1]]
    assert costs == sorted(costs, reverse=True)
    assert sum(r.cost_us for r in rows) == pytest.approx(ours.total_us - cpp.total_us)
    assert co.totals(rows) == pytest.approx((ours.total_us, cpp.total_us))


def test_kind_map_is_by_kind_and_names_registered_operators():
    assert co.canonical_kind("static_runtime::reshape_copy") == "aten::reshape"
    assert co.canonical_kind("static_runtime::VarTupleUnpack") == "prim::TupleUnpack"
    assert co.canonical_kind("prim::VarTupleUnpack") == "prim::TupleUnpack"
    assert co.canonical_kind("aten::linear") == "aten::linear"
    # every C++ runtime kind in the map is an operator the installed torch registers
    registered = {s.name for s in torch._C._jit_get_all_schemas()}
    for kind in co.KIND_MAP:
        if kind.startswith("static_runtime::") and kind not in (
                "static_runtime::add", "static_runtime::sub"):
            assert kind in registered, kind
    assert not set(co.FUSED_KINDS) & set(co.KIND_MAP)


def _independent_counts(mod: sr.StaticModule, scripted: torch.jit.ScriptModule):
    """Kinds counted from the graphs: ours from the prepared graph's top level, the C++
    runtime's from the frozen TorchScript graph with its variadic cat (a list built only
    for ``cat`` is not a node of its own); both through ``canonical_kind``."""
    ours = Counter(co.canonical_kind(n.kind) for n in mod.graph.nodes
                   if n.kind != "prim::Constant")
    frozen = torch.jit.freeze(scripted.eval())
    cpp: Counter[str] = Counter()
    for n in frozen.graph.nodes():
        kind = n.kind()
        if kind == "prim::Constant":
            continue
        if kind == "prim::ListConstruct" and all(
                u.user.kind() == "aten::cat" for u in n.output().uses()):
            continue
        cpp[co.canonical_kind("prim::VarConcat" if kind == "aten::cat" else kind)] += 1
    return ours, cpp


def test_compare_counts_every_node_of_both_graphs():
    scripted = script(Known())
    x = torch.randn(2, 8)
    # unmeasured kernels: the linear keeps its relu apart (measured, the two are one node)
    mod = sr.StaticModule(scripted, sr.StaticModuleOptions(kernel_choice="default"))
    c = co.compare(mod, (x,), scripted=scripted, repeats=2, warmup=1, runs=3)
    assert c.against == "pytorch_static_runtime" and c.note == ""
    ours, cpp = _independent_counts(mod, scripted)
    assert ours["aten::add"] == 2 and ours["aten::relu"] == 1 and ours["aten::cat"] == 1
    rows = {r.kind: r for r in c.rows if r.kind != co.OUTSIDE}
    assert {k: r.ours_instances for k, r in rows.items() if r.ours_instances} == dict(ours)
    assert {k: r.other_instances for k, r in rows.items() if r.other_instances} == dict(cpp)
    assert rows["aten::add"].ours_kinds == ("static_runtime::add",)
    assert rows["aten::relu"].ours_kinds == ("aten::relu_",)
    for r in c.rows:
        assert r.ours_us is None or r.kind == co.OUTSIDE or r.ours_us >= 0
    assert sum(r.cost_us for r in c.rows) == pytest.approx(c.ours.total_us - c.other.total_us)


def test_refused_model_is_compared_with_torchscript():
    # nn.TransformerEncoderLayer, scripted: torch 2.13's C++ runtime refuses its graph
    # (canEnableStaticRuntime: "Found unsupported op: aten::__isnot__")
    spec = MODELS["transformer_encoder"]
    scripted = script(spec.build())
    x = spec.example_inputs(1)[0]
    sm, why = co.cpp_static_module(scripted, (x,), {})
    assert sm is None and "refuses" in why
    c = co.compare(sr.StaticModule(scripted), (x,), scripted=scripted, repeats=1, warmup=1,
                   runs=2)
    assert c.against == "torchscript" and c.note == why
    fused = next(r for r in c.rows if r.kind == "aten::_transformer_encoder_layer_fwd")
    assert fused.other_instances == 1  # one call per model call, seen by the profiler
    assert c.other.method.startswith("torch.autograd.profiler")


def test_non_tensor_arguments_fall_back_with_a_reason():
    scripted = script(Steps())
    x = torch.randn(2, 3)
    c = co.compare(sr.StaticModule(scripted), (x, 4), scripted=scripted, repeats=1, warmup=1,
                   runs=2)
    assert c.against == "torchscript" and "tensors only" in c.note and "int" in c.note
    tanh = next(r for r in c.rows if r.kind == "aten::tanh")
    assert tanh.other_instances == 4  # inside the loop: once per iteration


def test_eager_peer_and_argument_checks():
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU()).eval()
    x = torch.randn(2, 4)
    ep = torch.export.export(model, (x,))
    c = co.compare(sr.StaticModule(ep), (x,), eager=ep.module(), repeats=1, warmup=1, runs=2)
    assert c.against == "eager"
    assert any(r.kind == "aten::linear" and r.other_instances == 1 for r in c.rows)
    with pytest.raises(ValueError, match="scripted= .* or eager="):
        co.compare(sr.StaticModule(ep), (x,))
    with pytest.raises(ValueError, match="at least 1"):
        co.compare(sr.StaticModule(ep), (x,), eager=ep.module(), repeats=0)
