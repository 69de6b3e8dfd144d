"""The generated-code executor (``runtime/codegen/executor.py``): selected by the option, the
same results as the reference interpreter, errors that name the IR node."""

import traceback

import pytest
import torch
from codegen_cases import LOOPY
from differential import assert_same, script

import static_runtime as sr
from static_runtime.models import MODELS
from static_runtime.runtime.codegen import CodegenExecutor
from static_runtime.runtime.hot import wait_for_builds
from static_runtime.runtime.interpreter import Interpreter


def test_executor_option_selects_the_executor():
    fn = script(LOOPY)
    assert isinstance(sr.StaticModule(fn).runtime()._interp, CodegenExecutor)
    ref = sr.StaticModule(fn, options=sr.StaticModuleOptions(executor="interpreter"))
    assert type(ref.runtime()._interp) is Interpreter


@pytest.mark.parametrize("name", ["mlp", "dlrm", "multi_head_attention", "transformer_encoder",
                                  "resnet_small", "control_flow", "attribute_setter",
                                  "class_user"])
def test_generated_code_equals_the_reference_interpreter(name):
    spec = MODELS[name]
    scripted = torch.jit.script(spec.build())
    fast = sr.StaticModule(scripted).runtime()
    slow = sr.StaticModule(scripted, options=sr.StaticModuleOptions(executor="interpreter"))
    for batch, seed in ((2, 0), (2, 1), (3, 2)):
        inputs = spec.example_inputs(batch, seed=seed)
        assert_same(fast(*inputs), slow.runtime()(*inputs))


def test_an_error_names_the_node_and_its_source_line():
    src = """
def f(x: torch.Tensor, y: torch.Tensor, n: int):
    for _ in range(n):
        x = torch.matmul(x, y)
    return x
"""
    mod = sr.StaticModule(script(src))
    mod(torch.ones(2, 2), torch.ones(2, 2), 2)
    with pytest.raises(RuntimeError) as info:
        mod(torch.ones(2, 3), torch.ones(2, 2), 2)
    notes = info.value.__notes__
    assert "aten::matmul" in notes[0] and "prim::Loop" in notes[1]
    # The traceback shows the generated line itself.
    text = "".join(traceback.format_exception(info.value))
    assert "<static_runtime generated" in text and "_f_matmul" in text


def test_sizes_run_before_are_entered_without_installing_their_layout_again(monkeypatch):
    """Traffic of every size switches signature on almost every call: a signature this
    runtime has run (checked, confirmed) is entered by what its calls need, kept per
    signature, not by ``prepare``'s lookup and install. Results equal eager on every switch,
    and inputs are left as they were."""
    class M(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(6, 4)

        def forward(self, x):
            return torch.relu(self.lin(torch.tanh(x))) * 2

    f = M().eval()
    mod = sr.StaticModule(torch.jit.script(f), sr.StaticModuleOptions(specialize_after=1000))
    rt = mod.runtime()
    g = torch.Generator().manual_seed(0)
    sizes = (3, 7, 5)
    for _ in range(3):
        for n in sizes:
            rt(torch.randn(n, 6, generator=g))
        wait_for_builds()  # (the shape program: the sizes move to its layouts)
    installs = []
    install = Interpreter.install
    monkeypatch.setattr(Interpreter, "install",
                        lambda self, layout: installs.append(layout) or install(self, layout))
    for n in (3, 7, 3, 5, 5, 7, 3):
        x = torch.randn(n, 6, generator=g)
        before = x.clone()
        with torch.no_grad():
            torch.testing.assert_close(rt(x), f(x))
        torch.testing.assert_close(x, before)
    assert installs == []
