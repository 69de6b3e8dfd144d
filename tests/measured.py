"""What tests of measured kernels share (``kernel_choice="measure"``): the option sets they run
under, a fresh kernel-choice cache per test, and the mark for tests of our own C kernels."""

import pytest
import torch

import static_runtime as sr
from static_runtime.ops import ckernels
from static_runtime.ops.kernels import Choice, KernelChooser

MEASURE = sr.StaticModuleOptions(kernel_choice="measure", verify_memory_plans=True,
                                 specialize_after=0)
#: generated code and the reference interpreter, both measuring
OPTIONS = {"measure": MEASURE,
           "interpreter": sr.StaticModuleOptions(kernel_choice="measure",
                                                 executor="interpreter")}

#: skips a test module of our own kernels where no compiler could build them
needs_ckernels = pytest.mark.skipif(not ckernels.available(),
                                    reason=f"no C kernels: {ckernels.why_unavailable()}")


def force_kernel(monkeypatch, kernel: str) -> None:
    """Every measured node's choice is ``kernel``, without timing anything."""
    monkeypatch.setattr(KernelChooser, "choose",
                        lambda self, key, names, make, default: Choice(kernel, {}, "forced"))


def answers_as(mod: sr.StaticModule, model, argument_sets) -> None:
    """``mod`` answers each set of arguments as ``model`` does — dtype, shape and values,
    twice in a row — and leaves the arguments as they were."""
    for args in argument_sets:
        before = [a.clone() for a in args]
        want = model(*args)
        for _ in range(2):
            got = mod(*args)
            assert got.dtype == want.dtype and got.shape == want.shape
            torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
        assert all(torch.equal(a, b) for a, b in zip(args, before, strict=True))


@pytest.fixture(autouse=True)
def fresh_kernel_cache(tmp_path, monkeypatch):
    """Every test measures afresh: its own, empty kernel-choice cache (imported by a test
    module, it applies to each of its tests)."""
    monkeypatch.setenv("STATIC_RUNTIME_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache"
