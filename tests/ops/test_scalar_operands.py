"""Tensor–number operators with a constant number (``ops/scalar_operands.py``): the number goes
to the operator as a tensor made once per dtype, and the result — values bit for bit, dtype,
shape — is what TorchScript gives for every dtype (those it applies to and those it leaves
to the binding), 0-dim and larger tensors, scripted and exported."""

import math

import pytest
import torch
from differential import check

import static_runtime as sr

# an out variant that disagrees with its functional form is a bug here, not a fallback
pytestmark = pytest.mark.filterwarnings(
    "error::static_runtime.runtime.checks.OutVariantWarning")

EXPRESSIONS = {"mul": "x * {c}", "div": "x / {c}", "add": "x + {c}", "sub": "x - {c}",
               "rsub": "torch.rsub(x, {c})", "lt": "x < {c}", "ge": "x >= {c}", "eq": "x == {c}",
               "ne": "x != {c}"}
CONSTANTS = [0.5, 0.1, 3, -2, 1e-7, 1e30]
DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int32,
          torch.int64, torch.uint8, torch.int8]


def _input(dtype: torch.dtype, shape: tuple[int, ...], seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    if dtype.is_floating_point:
        x = torch.randn(shape, generator=g) * 4
        x.view(-1)[:1] = 0.1 if x.numel() else x.view(-1)[:1]  # a value the constants hit
        return x.to(dtype)
    return torch.randint(0, 100, shape, generator=g).to(dtype)


def _same(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.dtype == b.dtype and a.shape == b.shape and torch.equal(
        a.nan_to_num(0.25) if a.is_floating_point() else a,
        b.nan_to_num(0.25) if b.is_floating_point() else b)


@pytest.mark.parametrize("name", list(EXPRESSIONS))
def test_every_dtype_and_constant_gives_torchscripts_bits(name):
    for c in CONSTANTS:
        # (an intermediate, so that its out variant writes the arena)
        source = f"def f(x):\n    return ({EXPRESSIONS[name].format(c=c)}).clone()\n"
        fn = torch.jit.CompilationUnit(source).f
        mod = sr.StaticModule(fn)
        assert "made once" in mod.describe(), mod.describe()
        for k, dtype in enumerate(DTYPES):
            for shape in ((), (3,), (2, 5)):
                x = _input(dtype, shape, k)
                before = x.clone()
                for _ in range(2):  # the first call records, the next writes the arena
                    try:
                        expected = fn(x)
                    except RuntimeError as e:
                        with pytest.raises(RuntimeError, match=str(e).splitlines()[0][:30]):
                            mod(x)
                        continue
                    got = mod(x)
                    assert _same(got, expected), (name, c, dtype, shape, got, expected)
                assert torch.equal(x, before)


def test_not_a_constant_or_alpha_other_than_one_is_left_to_the_binding():
    fn = torch.jit.CompilationUnit("def f(x, c: float):\n    return x * c\n").f
    assert "made once" not in sr.StaticModule(fn).describe()
    fn = torch.jit.CompilationUnit("def f(x):\n    return torch.rsub(x, 2.0, alpha=3)\n").f
    mod = sr.StaticModule(fn)
    assert "made once" not in mod.describe()
    x = torch.randn(4)
    assert torch.equal(mod(x), fn(x))


class Scaled(torch.nn.Module):
    def forward(self, x):
        return (x * 0.5 + 1) / 8 - 2, 1 - x, x > 0.3


@pytest.mark.parametrize("frontend", ["script", "export"])
def test_a_model_of_constant_operands_differential(frontend):
    g = torch.Generator().manual_seed(1)
    first, second = [torch.randn(2, 3, generator=g)], [torch.randn(5, 1, 4, generator=g)]
    if frontend == "script":
        mod = check(Scaled(), first, second)["default"]
    else:
        ep = torch.export.export(Scaled(), tuple(first))
        mod = sr.StaticModule(ep)
        for xs in (first, first):
            before = xs[0].clone()
            for got, want in zip(mod(*xs), Scaled()(*xs), strict=True):
                assert _same(got, want)
            assert torch.equal(xs[0], before)
    assert mod.describe().count("made once") >= 4, mod.describe()


def test_non_finite_constants():
    for c in ("float('inf')", "float('nan')", "-float('inf')"):
        fn = torch.jit.CompilationUnit(f"def f(x):\n    return x * {c}, x < {c}\n").f
        mod = sr.StaticModule(fn)
        x = torch.tensor([0.0, 1.0, -2.0, math.inf])
        for got, want in zip(mod(x), fn(x), strict=True):
            assert _same(got, want)
