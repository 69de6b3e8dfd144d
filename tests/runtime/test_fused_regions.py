"""Fused regions compiled by Inductor (``fusion_compiler="inductor"``): results equal the
TorchScript interpreter's and the unfused graph's, on two input shapes, for both executors;
numbers read at run time; refusal; save/load; threads; forks.

Each compile costs seconds on a cold cache, so the cases are few and small.
"""

from __future__ import annotations

import threading
import warnings

import pytest
import torch
from differential import check

import static_runtime as sr
from static_runtime.ops import inductor
from static_runtime.ops.native.region import RegionWarning
from static_runtime.passes.regions import FUSED_REGION

pytestmark = pytest.mark.skipif(inductor.compiler_available() is not None,
                                reason=str(inductor.compiler_available()))

FUSED = {
    "fused": sr.StaticModuleOptions(fusion_compiler="inductor", verify_memory_plans=True),
    "fused-interpreter": sr.StaticModuleOptions(fusion_compiler="inductor",
                                                executor="interpreter"),
}


def n_regions(mod: sr.StaticModule) -> int:
    return sum(n.kind == FUSED_REGION for n in mod.graph.walk())


def block(x: torch.Tensor, y: torch.Tensor, scale: float, k: int):
    a = torch.tanh(x * y) + x
    b = torch.softmax(a * scale, dim=-1)
    c = torch.nn.functional.layer_norm(b + y, [x.shape[-1]])
    s = (c * k).sum(dim=-1, keepdim=True)
    return torch.where(c > 0, c, -c) / (s.abs() + 1.0), s


def test_a_region_equals_the_interpreter_on_two_shapes_for_both_executors():
    g = torch.Generator().manual_seed(0)
    first = (torch.randn(2, 16, generator=g), torch.randn(2, 16, generator=g), 0.5, 3)
    second = (torch.randn(5, 8, generator=g), torch.randn(5, 8, generator=g), 2.0, -1)
    mods = check(block, first, second, options=FUSED)
    for mod in mods.values():
        assert n_regions(mod) >= 1
        assert "compiled for 2 signature(s)" in mod.describe()


def test_numbers_keep_the_dtypes_of_the_unfused_graph():
    # an int tensor times a float read at run time is a float32 tensor; times an int, int64
    def f(x: torch.Tensor, s: float, k: int):
        a = (x + 1) * s
        b = (x - 1) * k
        return a.abs() + 1, (b.abs() + 2) * 3

    g = torch.Generator().manual_seed(1)
    xs = torch.randint(-5, 5, (3, 4), generator=g)
    mods = check(f, (xs, 0.25, 3), (xs[:2], -1.5, 7), options={"fused": FUSED["fused"]})
    assert n_regions(mods["fused"]) >= 1


def test_the_control_flow_model_with_regions_in_its_loop():
    from static_runtime.models import MODELS

    spec = MODELS["control_flow"]
    model = spec.factory().eval()
    g = torch.Generator().manual_seed(2)
    mods = check(torch.jit.script(model), spec.make_inputs(1, g), spec.make_inputs(4, g),
                 options={"fused": FUSED["fused"]})
    loop = next(n for n in mods["fused"].graph.walk() if n.kind == "prim::Loop")
    assert any(n.kind == FUSED_REGION for n in loop.blocks[0].nodes)


def test_without_a_compiler_a_region_warns_and_runs_unfused(monkeypatch):
    monkeypatch.setattr(inductor, "compiler_available", lambda: "no compiler in this test")
    x, y = torch.randn(3, 5), torch.randn(3, 5)
    mod = sr.StaticModule(torch.jit.script(block),
                          options=sr.StaticModuleOptions(fusion_compiler="inductor"))
    with pytest.warns(RegionWarning, match=r"fused region %\S+.*no compiler in this test"):
        out = mod(x, y, 0.5, 2)
    torch.testing.assert_close(out, block(x, y, 0.5, 2))
    assert "unfused for 1" in mod.describe()
    with warnings.catch_warnings():
        warnings.simplefilter("error", RegionWarning)  # warned once per signature
        torch.testing.assert_close(mod(x, y, 0.5, 2), block(x, y, 0.5, 2))


def test_save_and_load_keep_the_regions_and_compile_again(tmp_path):
    x, y = torch.randn(2, 16), torch.randn(2, 16)
    mod = sr.StaticModule(torch.jit.script(block),
                          options=sr.StaticModuleOptions(fusion_compiler="inductor"))
    expected = mod(x, y, 0.5, 3)
    mod.save(tmp_path / "m.srm")
    loaded = sr.load(tmp_path / "m.srm")
    assert n_regions(loaded) == n_regions(mod) >= 1
    assert str(loaded.graph) == str(mod.graph)
    torch.testing.assert_close(loaded(x, y, 0.5, 3), expected)
    assert "compiled for 1 signature(s)" in loaded.describe()


def test_threads_compiling_and_running_the_same_region_at_once():
    mod = sr.StaticModule(torch.jit.script(block),
                          options=sr.StaticModuleOptions(fusion_compiler="inductor"))
    inputs = [(torch.randn(n, 16), torch.randn(n, 16), 0.1 * n, n) for n in (1, 3, 1, 3)]
    results: list = [None] * len(inputs)
    errors: list = []

    def work(i):
        try:
            for _ in range(5):
                results[i] = mod(*inputs[i])
        except Exception as e:  # noqa: BLE001
            errors.append(e)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(len(inputs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    assert not errors
    for args, got in zip(inputs, results):
        torch.testing.assert_close(got, block(*args))


def _forked(x: torch.Tensor) -> torch.Tensor:
    return torch.sigmoid(torch.tanh(x * 2.0) + x).exp()


def _forking(x: torch.Tensor) -> torch.Tensor:
    fut = torch.jit.fork(_forked, x)
    here = _forked(x + 1)
    return torch.jit.wait(fut) + here


def test_regions_inside_forked_functions():
    mods = check(_forking, (torch.randn(4, 4),), (torch.randn(2, 9),),
                 options={"fused": FUSED["fused"]})
    assert n_regions(mods["fused"]) >= 1


def test_a_region_is_compiled_per_intra_op_thread_count():
    # Inductor's kernels keep the OpenMP thread count they were compiled with
    x, y = torch.randn(2, 16), torch.randn(2, 16)
    mod = sr.StaticModule(torch.jit.script(block),
                          options=sr.StaticModuleOptions(fusion_compiler="inductor"))
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        one = mod(x, y, 0.5, 3)
        torch.set_num_threads(2)
        two = mod(x, y, 0.5, 3)
    finally:
        torch.set_num_threads(before)
    torch.testing.assert_close(one, two)
    assert "compiled for 2 signature(s)" in mod.describe()


def _device_cast_inside(x: torch.Tensor) -> torch.Tensor:
    a = torch.sigmoid(torch.tanh(x) + 1.0)
    b = a.to(torch.device("cpu"), torch.float32)  # aten::to.device: no meta run copies it
    return (b * 2.0).exp()


def test_a_cast_to_a_device_inside_a_region():
    mods = check(_device_cast_inside, (torch.randn(3, 5),), (torch.randn(7, 2),),
                 options={"fused": FUSED["fused"]})
    mod = mods["fused"]
    (region,) = [n for n in mod.graph.walk() if n.kind == FUSED_REGION]
    assert "aten::to" in [n.kind for n in region.attrs["subgraph"].block.nodes]
    assert "compiled for 2 signature(s)" in mod.describe()


# -- the option never raises where the operators would not


def _strided_inputs(x: torch.Tensor, y: torch.Tensor):
    a = x[:, :4]  # a slice: not dense
    e = y.expand(x.shape[0], 4)  # stride 0
    kept = torch.cat([a, e])  # reads both outside the region: the region gets them as inputs
    return torch.sigmoid(torch.tanh(a * e) + a).exp(), kept


def test_a_region_is_compiled_for_the_strides_of_a_slice_and_an_expanded_tensor():
    # Compiled once for dense copies of them, the code asserted dense strides and the
    # real inputs failed it (an AssertionError from a LLaMA decoder's rotary embedding)
    g = torch.Generator().manual_seed(3)
    first = (torch.randn(3, 8, generator=g), torch.randn(4, generator=g))
    second = (torch.randn(6, 10, generator=g), torch.randn(4, generator=g))
    with warnings.catch_warnings():
        warnings.simplefilter("error", RegionWarning)
        mods = check(_strided_inputs, first, second, options=FUSED)
    for mod in mods.values():
        (region,) = [n for n in mod.graph.walk() if n.kind == FUSED_REGION]
        assert {v.node.kind for v in region.inputs} == {"aten::slice", "aten::expand"}
        assert "compiled for 2 signature(s)" in mod.describe()
        assert "unfused" not in mod.describe()


def _fake_compiler(monkeypatch, behave):
    """Regions compile to ``behave(n, run, args)`` (``n``: calls so far, ``run``: the
    region's operators), in place of Inductor's code."""
    from static_runtime.ops.native import region

    calls = []

    def compile_graph(fn, example_inputs):
        def call(args):
            calls.append(1)
            return behave(len(calls), fn, list(args))

        return inductor.Compiled(call, "", 0.0)

    monkeypatch.setattr(region, "compile_graph", compile_graph)
    return calls


def _chain(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return torch.sigmoid(torch.tanh(x * y) + x).exp()


def _fused(fn) -> sr.StaticModule:
    return sr.StaticModule(torch.jit.script(fn),
                           options=sr.StaticModuleOptions(fusion_compiler="inductor"))


def test_compiled_code_that_raises_when_first_run_warns_and_runs_unfused(monkeypatch):
    def behave(n, run, args):
        raise RuntimeError("the compiler got it wrong")

    calls = _fake_compiler(monkeypatch, behave)
    mod = _fused(_chain)
    x, y = torch.randn(2, 3), torch.randn(2, 3)
    with pytest.warns(RegionWarning, match=r"fused region %\S+ .*float32\[2, 3\].*"
                                           r"raised RuntimeError: the compiler got it wrong"):
        torch.testing.assert_close(mod(x, y), _chain(x, y))
    assert "unfused for 1" in mod.describe()
    with warnings.catch_warnings():
        warnings.simplefilter("error", RegionWarning)
        torch.testing.assert_close(mod(x, y), _chain(x, y))
    assert len(calls) == 1  # not tried again


def test_compiled_code_that_raises_on_a_later_call_warns_and_runs_unfused(monkeypatch):
    # Inductor's code asserts the sizes and strides of its inputs (a signature change) but
    # also, say, of buffers inside it: an AssertionError on a signature it has served
    failing = []

    def behave(n, run, args):
        if failing:
            raise AssertionError("expected size 2==2, stride 32==16 at dim=1")
        return run(*args)

    calls = _fake_compiler(monkeypatch, behave)
    mod = _fused(_chain)
    x, y = torch.randn(2, 3), torch.randn(2, 3)
    with warnings.catch_warnings():
        warnings.simplefilter("error", RegionWarning)
        for _ in range(2):
            torch.testing.assert_close(mod(x, y), _chain(x, y))
    failing.append(True)
    with pytest.warns(RegionWarning, match=r"raised AssertionError: expected size 2==2"):
        torch.testing.assert_close(mod(x, y), _chain(x, y))
    tried = len(calls)
    with warnings.catch_warnings():
        warnings.simplefilter("error", RegionWarning)
        torch.testing.assert_close(mod(x, y), _chain(x, y))
    assert len(calls) == tried  # the signature's code is not tried again
    assert "compiled for 0 signature(s), unfused for 1" in mod.describe()


def test_compiled_code_returning_other_results_is_not_used(monkeypatch):
    def behave(n, run, args):
        return tuple(t + 1e-3 for t in run(*args))

    _fake_compiler(monkeypatch, behave)
    mod = _fused(_chain)
    x, y = torch.randn(2, 3), torch.randn(2, 3)
    with pytest.warns(RegionWarning, match=r"result 0 is not the operators' \(Greatest abs"):
        torch.testing.assert_close(mod(x, y), _chain(x, y))
    torch.testing.assert_close(mod(x, y), _chain(x, y))


def _floor_div(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return torch.abs(torch.div(x * 3 + 1, y, rounding_mode="floor") - x) * 2 + 1


def test_the_operators_own_errors_propagate_and_the_code_keeps_serving(monkeypatch):
    # integer division by zero: the operators raise, on the signature's sizes and dtypes
    def behave(n, run, args):
        if not args[1].all():
            raise RuntimeError("the compiled code's own error")
        return run(*args)

    calls = _fake_compiler(monkeypatch, behave)
    mod = _fused(_floor_div)
    x = torch.arange(6).reshape(2, 3)
    good, zero = torch.full((2, 3), 2), torch.tensor([[1, 0, 2], [3, 4, 5]])
    with warnings.catch_warnings():
        warnings.simplefilter("error", RegionWarning)
        assert torch.equal(mod(x, good), _floor_div(x, good))
        with pytest.raises(RuntimeError, match="ZeroDivisionError") as raised:
            mod(x, zero)
        assert "in fused region" in "".join(getattr(raised.value, "__notes__", ()))
        assert torch.equal(mod(x, good), _floor_div(x, good))
    assert "compiled for 1 signature(s)" in mod.describe() and "unfused" not in mod.describe()
    assert len(calls) >= 4


def _neg_chain(r: torch.Tensor) -> torch.Tensor:
    return torch.abs(r * 2 + r - 1)


@pytest.mark.parametrize("bit", ["negative", "conjugate"])
def test_lazily_negated_or_conjugated_inputs_are_read_with_their_bit(bit):
    # Found by tools/opdb (fft.ihfftn, whose result is a lazily conjugated tensor, followed
    # by element-wise ops): Inductor's code reads memory and ignores the bits — compiled for
    # a plain tensor, it took a negated one on the fast path and gave the wrong sign; a
    # conjugated one made it raise (view_as_real).
    c = torch.randn(4, 6, dtype=torch.complex64)
    x = c.conj().imag if bit == "negative" else c.conj()
    assert x.is_neg() or x.is_conj()
    mod = sr.StaticModule(torch.jit.script(_neg_chain),
                          options=sr.StaticModuleOptions(fusion_compiler="inductor"))
    assert n_regions(mod) == 1
    plain = x.resolve_conj().resolve_neg()
    with warnings.catch_warnings():
        warnings.simplefilter("error", RegionWarning)
        for arg in (plain, x, plain, x):
            torch.testing.assert_close(mod(arg), _neg_chain(plain))
    assert "unfused" not in mod.describe()


def _argmax_chain(x: torch.Tensor) -> torch.Tensor:
    return torch.argmax(x).neg().neg().neg().neg()


def test_a_0_dim_signature_does_not_take_other_ranks():
    # Found by tools/opdb (argmax, chained): Inductor asserts no size or stride for a
    # 0-dim input (it reads it as a number), so the code compiled for a 0-dim x took the
    # next (3, 5) x on the fast path and returned its 0-dim answer.
    mod = sr.StaticModule(torch.jit.script(_argmax_chain),
                          options=sr.StaticModuleOptions(fusion_compiler="inductor"))
    assert n_regions(mod) == 1
    a, scalar = torch.arange(15.0).reshape(3, 5), torch.tensor(2.0)  # argmax 14 and 0
    for x in (a, a, scalar, a, scalar, scalar, a):
        torch.testing.assert_close(mod(x), _argmax_chain(x))
