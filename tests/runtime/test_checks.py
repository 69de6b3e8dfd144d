"""Out variants are checked against their functional form before the arena path serves them
(``runtime/checks.py``).

Operators defined here with ``torch.library`` carry a functional overload and an ``.out``
overload, found by schema like any ATen operator's: one correct (and counting its calls),
the others wrong in the ways an out kernel can be — leaving ``out`` unwritten, writing part
of it, writing other values, raising. Each result is consumed by a following operator, so it
is an intermediate the arena holds from the second call of a signature on.
"""

from __future__ import annotations

import warnings
from collections import Counter

import pytest
import torch
from differential import _snapshot

import static_runtime as sr
from static_runtime.runtime.checks import argument_key

_lib = torch.library.Library("sr_checks", "DEF")
calls: Counter[str] = Counter()


def _define(name: str, out_kernel) -> None:
    _lib.define(f"{name}(Tensor x) -> Tensor")
    _lib.define(f"{name}.out(Tensor x, *, Tensor(a!) out) -> Tensor(a!)")

    def functional(x):
        calls[f"{name}"] += 1
        return x * 2 + 1

    def out_variant(x, *, out):
        calls[f"{name}.out"] += 1
        out_kernel(x, out)
        return out

    _lib.impl(name, functional, "CPU")
    _lib.impl(f"{name}.out", out_variant, "CPU")
    _lib.impl(name, lambda x: torch.empty_like(x), "Meta")
    _lib.impl(f"{name}.out", lambda x, *, out: out, "Meta")


def _right(x, out):
    torch.add(x * 2, 1, out=out)


def _untouched(x, out):
    pass


def _partial(x, out):
    out.view(-1)[: out.numel() // 2].copy_((x * 2 + 1).view(-1)[: out.numel() // 2])


def _wrong(x, out):
    torch.add(x * 3, 1, out=out)


def _raises(x, out):
    raise RuntimeError("this out kernel is broken")


def _wrong_for_matrices(x, out):
    (_wrong if x.dim() == 2 else _right)(x, out)


for _name, _kernel in [("right", _right), ("untouched", _untouched), ("partial", _partial),
                       ("wrong", _wrong), ("raises", _raises),
                       ("wrong_for_matrices", _wrong_for_matrices)]:
    _define(_name, _kernel)


def model(kind: str):
    op = getattr(torch.ops.sr_checks, kind)

    def f(x):
        return op(x).relu() + x

    return f


def expected(x):
    return (x * 2 + 1).relu() + x


def traced(kind: str, x):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return torch.jit.trace(model(kind), x)


def built(f, x, **trace) -> sr.StaticModule:
    """``f`` traced on ``x`` and built, tracing's and the build's warnings silenced."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return sr.StaticModule(torch.jit.trace(f, x, **trace))


def inputs(*shape, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


EXECUTORS = {"codegen": sr.StaticModuleOptions(verify_memory_plans=True),
             "interpreter": sr.StaticModuleOptions(executor="interpreter")}


@pytest.mark.parametrize("executor", list(EXECUTORS))
@pytest.mark.parametrize("kind", ["untouched", "partial", "wrong", "raises"])
def test_a_wrong_out_variant_is_refused_and_every_call_is_right(kind, executor):
    x, y = inputs(3, 5), inputs(4, 2, seed=1)
    mod = sr.StaticModule(traced(kind, x), options=EXECUTORS[executor])
    held = []
    with pytest.warns(sr.OutVariantWarning, match=rf"sr_checks::{kind}.*float32\[3, 5\]"):
        torch.testing.assert_close(mod(x), expected(x))
    with warnings.catch_warnings():
        warnings.simplefilter("error", sr.OutVariantWarning)  # said once, not per call
        for a in (x, x, y, y, x):
            before = _snapshot(a)
            out = mod(a)
            torch.testing.assert_close(out, expected(a))
            torch.testing.assert_close(a, before)
            held.append((out, _snapshot(out)))
    for out, snap in held:
        torch.testing.assert_close(out, snap)
    described = mod.describe()
    assert "runs functionally: out variant refused" in described
    assert "out variants refused (1)" in described


def test_the_message_says_what_differed():
    x = inputs(2, 4)
    cases = {"untouched": "8 of 8 elements differ, 8 of them never written",
             "partial": "4 of 8 elements differ, 4 of them never written",
             "wrong": r"8 of 8 elements differ \(greatest difference",
             "raises": "it raised RuntimeError: this out kernel is broken"}
    for kind, text in cases.items():
        mod = sr.StaticModule(traced(kind, x))
        with pytest.warns(sr.OutVariantWarning, match=text):
            mod(x)


def test_a_right_out_variant_serves_and_is_checked_once_per_dtype_and_rank():
    """Checked on the first (recording) call of the first signature; other sizes of the
    same dtype and rank check nothing again; a new dtype does."""
    x = inputs(3, 5)
    mod = sr.StaticModule(traced("right", x))
    calls.clear()
    with warnings.catch_warnings():
        warnings.simplefilter("error", sr.OutVariantWarning)
        mod(x)  # records: functional once, and the out variant once into a scratch tensor
        assert calls == {"right": 1, "right.out": 1}
        mod(x)  # the arena: the out variant alone
        assert calls == {"right": 1, "right.out": 2}
        for rows in (1, 7, 2):  # other sizes: recorded (functional), then the arena
            a = inputs(rows, 5, seed=rows)
            torch.testing.assert_close(mod(a), expected(a))
            torch.testing.assert_close(mod(a), expected(a))
        assert calls == {"right": 4, "right.out": 5}
        d = x.double()
        torch.testing.assert_close(mod(d), expected(d))  # a new dtype: checked again
        assert calls == {"right": 5, "right.out": 6}
    assert "refused" not in mod.describe()
    assert "[managed]" in next(line for line in mod.describe().splitlines()
                               if line.startswith("sr_checks::right"))


def test_checks_off_trusts_the_out_variant():
    """The option exists to bisect and to measure: with it off the broken out variant
    serves (and the second call is wrong), which is what the checks prevent."""
    x = inputs(3, 5)
    mod = sr.StaticModule(traced("wrong", x),
                          options=sr.StaticModuleOptions(check_out_variants=False))
    torch.testing.assert_close(mod(x), expected(x))
    assert not torch.allclose(mod(x), expected(x))


def test_a_layout_planned_ahead_is_checked_on_its_first_real_call():
    """With example inputs the arena is planned on meta tensors, with no recording call:
    the first real call checks the out variants into the arena tensors themselves."""
    x = inputs(3, 5)
    mod = sr.StaticModule(traced("untouched", x), example_inputs=(x,))
    assert mod.ahead_of_time_error is None
    with pytest.warns(sr.OutVariantWarning, match="never written"):
        torch.testing.assert_close(mod(x), expected(x))
    for _ in range(2):
        torch.testing.assert_close(mod(x), expected(x))
    right = sr.StaticModule(traced("right", x), example_inputs=(x,))
    calls.clear()
    with warnings.catch_warnings():
        warnings.simplefilter("error", sr.OutVariantWarning)
        for _ in range(3):
            torch.testing.assert_close(right(x), expected(x))
    assert calls == {"right": 1, "right.out": 3}  # checked on the first call, then served


def test_refusal_holds_for_every_runtime_and_layout():
    x, y = inputs(3, 5), inputs(6, 5, seed=2)
    mod = sr.StaticModule(traced("wrong", x))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", sr.OutVariantWarning)
        mod(x)
    for rt in (mod.runtime(), sr.StaticRuntime(mod), sr.StaticRuntime(mod)):
        for a in (y, y, x, x):
            torch.testing.assert_close(rt(a), expected(a))


def test_the_fft_out_kernel_that_leaves_out_unwritten():
    """ATen's ``fft_ihfftn.out`` over one dimension leaves ``out`` as it was (torch 2.13):
    found by running PyTorch's operator database with results consumed by a later op."""

    def f(x):
        return torch.fft.ihfftn(x, s=(8,)) * 2

    x, y = inputs(2, 3, 8), inputs(4, 8, seed=3)
    mod = built(f, x)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", sr.OutVariantWarning)
        for a in (x, x, y, y, x):
            torch.testing.assert_close(mod(a), f(a))


def test_random_operators_are_checked_on_the_same_draws():
    """The check puts the generator back before running the out variant, so both forms
    draw the same numbers, the check agrees, and the model's random stream advances once
    per call, as under eager PyTorch."""

    def f(x):
        return torch.bernoulli(torch.sigmoid(x)) * torch.normal(x, 0.5) * 2

    x, y = inputs(3, 4), inputs(5, 4, seed=1)
    mod = built(f, x, check_trace=False)
    random = [line for line in mod.describe().splitlines()
              if line.startswith(("aten::bernoulli", "aten::normal"))]
    assert len(random) == 2 and all("out variant" in line for line in random)
    torch.manual_seed(11)
    eager = [f(a) for a in (x, x, y, x)]
    torch.manual_seed(11)
    with warnings.catch_warnings():
        warnings.simplefilter("error", sr.OutVariantWarning)
        ours = [mod(a) for a in (x, x, y, x)]
    for a, b in zip(ours, eager):
        torch.testing.assert_close(a, b)
    assert "refused" not in mod.describe()


def test_argument_key_ignores_sizes_not_dtypes_ranks_or_layout():
    a, b = torch.zeros(2, 3), torch.zeros(5, 7)
    assert argument_key([a, 1, [a]]) == argument_key([b, 4, [b]])
    assert argument_key([a]) != argument_key([a.double()])
    assert argument_key([a]) != argument_key([a.view(6)])
    assert argument_key([b]) != argument_key([b.t()])
    assert argument_key([a, 1]) != argument_key([a, 1.0])


def test_a_new_size_that_brings_a_new_rank_is_checked():
    """``squeeze(0)`` makes the operator's argument a vector for one row and a matrix for
    more, under the same input signature structure. A new size records through generated
    code, which checks nothing as it goes: afterwards every managed node's arguments are
    looked at, and an argument kind never checked makes the next call a checking one."""

    def f(x):
        return torch.ops.sr_checks.wrong_for_matrices(x.squeeze(0)).relu() + 1

    def expect(x):
        return (x.squeeze(0) * 2 + 1).relu() + 1

    row, rows = inputs(1, 5), inputs(3, 5, seed=1)
    mod = built(f, row)
    with warnings.catch_warnings():
        warnings.simplefilter("error", sr.OutVariantWarning)
        for _ in range(2):
            torch.testing.assert_close(mod(row), expect(row))  # vectors: the kernel is right
    torch.testing.assert_close(mod(rows), expect(rows))  # recorded by generated code
    with pytest.warns(sr.OutVariantWarning, match=r"float32\[3, 5\]"):
        torch.testing.assert_close(mod(rows), expect(rows))  # checked before it serves
    for a in (rows, row, rows):
        torch.testing.assert_close(mod(a), expect(a))


def test_dtypes_the_cpu_cannot_compare_are_checked_through_a_wider_one():
    """``torch.equal`` has no ComplexHalf kernel on the CPU: the check compares such
    results as complex64 (found by the operator database's chained variant)."""

    def f(x):
        return x.chalf().neg().neg()

    x, y = inputs(5, 5), inputs(2, 3, seed=1)
    mod = built(f, x)
    with warnings.catch_warnings():
        warnings.simplefilter("error", sr.OutVariantWarning)
        for a in (x, x, y, x):
            got = mod(a)
            assert got.dtype is torch.complex32
            torch.testing.assert_close(got.to(torch.complex64), f(a).to(torch.complex64))
