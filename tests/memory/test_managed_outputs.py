"""manage_output_tensors: outputs come from a separate arena that the next call overwrites,
so a call is refused while the previous call's outputs (or views of them) are still held."""

import warnings

import pytest
import torch
from differential import assert_same, script

import static_runtime as sr
from static_runtime.models import MODELS

TWO_OUTPUTS = """
def f(x: torch.Tensor):
    a = torch.exp(x)
    return torch.sigmoid(a), torch.tanh(a)
"""
MANAGED = sr.StaticModuleOptions(manage_output_tensors=True, verify_memory_plans=True)


def runtime(src=TWO_OUTPUTS):
    return sr.StaticModule(script(src), options=MANAGED).runtime()


def test_outputs_are_managed_and_correct():
    rt = runtime()
    ref = script(TWO_OUTPUTS)
    for n in (4, 4, 4, 7, 7):
        x = torch.randn(n)
        assert_same(rt(x), ref(x))  # each result dropped before the next call
    assert {v.name for v in rt.module.lifetimes.outputs} and rt.module.memory_plan()
    assert rt._interp.layout.output_bytes == 2 * 64  # two 7-float outputs, aligned


def test_a_call_is_refused_while_outputs_are_held():
    rt = runtime()
    x = torch.randn(4)
    rt(x)
    held = rt(x)  # planned: now from the output arena
    with pytest.raises(RuntimeError, match="still referenced"):
        rt(x)
    view = held[0][1:]
    del held
    with pytest.raises(RuntimeError, match="still referenced"):
        rt(x)  # a view keeps them too
    del view
    out = rt(x)
    assert_same(out, script(TWO_OUTPUTS)(x))


def test_release_lets_the_next_call_overwrite():
    rt = runtime()
    x = torch.randn(4)
    rt(x)
    first = rt(x)
    rt.release_outputs()
    second = rt(x * 2)
    # The documented contract: released outputs are overwritten in place.
    assert first[0].data_ptr() == second[0].data_ptr()
    assert_same(first, second)


def test_outputs_outlive_the_runtime():
    rt = runtime()
    x = torch.randn(4)
    rt(x)
    out = rt(x)
    expected = script(TWO_OUTPUTS)(x)
    del rt
    import gc
    gc.collect()
    torch.empty(10_000)  # reuse freed memory, if the outputs did not keep theirs alive
    assert_same(out, expected)


def test_no_allocation_at_all_in_steady_state():
    rt = runtime()
    x = torch.randn(64, 64)
    for _ in range(3):
        rt(x)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU],
                                    profile_memory=True) as prof:
            for _ in range(5):
                rt(x)
    assert sum(1 for e in prof.events() if e.cpu_memory_usage > 0) == 0


@pytest.mark.parametrize("name", ["mlp", "dlrm", "multi_head_attention", "resnet_small",
                                  "transformer_encoder", "control_flow"])
def test_models_with_managed_outputs(name):
    spec = MODELS[name]
    scripted = torch.jit.script(spec.build())
    rt = sr.StaticModule(scripted, options=MANAGED).runtime()
    for batch, seed in ((2, 0), (2, 1), (3, 2), (2, 3)):
        inputs = spec.example_inputs(batch, seed=seed)
        expected = scripted(*inputs)
        assert_same(rt(*inputs), expected)
