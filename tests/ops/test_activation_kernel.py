"""Standalone activations under measured kernels (``ops/activations.py``): with either kernel
forced, GELU (exact and tanh), tanh, sigmoid and SiLU equal TorchScript's on two shape sets —
written into the arena and allocated — sizes that are and are not multiples of the vector
width included; strided and float64 inputs run PyTorch's."""

import pytest
import torch
from differential import check
from measured import MEASURE, fresh_kernel_cache, needs_ckernels  # noqa: F401

import static_runtime as sr
from static_runtime.ops.kernels import Choice, KernelChooser

pytestmark = needs_ckernels

ACTIVATIONS = {
    "gelu": "torch.nn.functional.gelu(x)",
    "gelu_tanh": "torch.nn.functional.gelu(x, approximate='tanh')",
    "tanh": "torch.tanh(x)",
    "sigmoid": "torch.sigmoid(x)",
    "silu": "torch.nn.functional.silu(x)",
}


def _source(expr: str) -> str:
    # the first activation is an intermediate (its out variant writes the arena), the
    # second a graph output (allocated)
    return (f"def f(x, y):\n    a = {expr}\n    b = {expr.replace('(x', '(y')}\n"
            f"    return a * 2.0, b\n")


@pytest.mark.parametrize("kernel", ["native", "aten"])
@pytest.mark.parametrize("act", list(ACTIVATIONS))
def test_forced_kernel_equals_torchscript(act, kernel, monkeypatch):
    monkeypatch.setattr(KernelChooser, "choose",
                        lambda self, key, names, make, default: Choice(kernel, {}, "forced"))
    fn = torch.jit.CompilationUnit(_source(ACTIVATIONS[act])).f
    g = torch.Generator().manual_seed(len(act))
    first = [torch.randn(37, generator=g) * 4, torch.randn((), generator=g)]  # (0-dim too)
    second = [torch.randn(3, 50, generator=g) * 4, torch.randn(2, 3, 17, generator=g) * 9]
    mod = check(fn, first, second, options={"measure": MEASURE}, rtol=2e-6, atol=2e-6)["measure"]
    assert mod.describe().count(f": {kernel} (forced)") >= 2


def test_strided_and_double_inputs_run_pytorchs(monkeypatch):
    monkeypatch.setattr(KernelChooser, "choose",
                        lambda self, key, names, make, default: Choice("native", {}, "forced"))
    fn = torch.jit.CompilationUnit(_source(ACTIVATIONS["gelu"])).f
    mod = sr.StaticModule(fn, MEASURE)
    strided = [torch.randn(8, 6).t(), torch.randn(5, 4)[:, 1]]
    double = [torch.randn(7, dtype=torch.float64), torch.randn(3, dtype=torch.float64)]
    for args in (strided, double, strided):
        for got, want in zip(mod(*args), fn(*args), strict=True):
            assert got.dtype == want.dtype and got.stride() == want.stride()
            torch.testing.assert_close(got, want)
    assert "native (forced)" not in mod.describe()
