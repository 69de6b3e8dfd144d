"""What tests of measured kernels share (``kernel_choice="measure"``): the option sets they run
under, a fresh kernel-choice cache per test, and the mark for tests of our own C kernels."""

import pytest

import static_runtime as sr
from static_runtime.ops import ckernels

MEASURE = sr.StaticModuleOptions(kernel_choice="measure", verify_memory_plans=True,
                                 specialize_after=0)
#: generated code and the reference interpreter, both measuring
OPTIONS = {"measure": MEASURE,
           "interpreter": sr.StaticModuleOptions(kernel_choice="measure",
                                                 executor="interpreter")}

#: skips a test module of our own kernels where no compiler could build them
needs_ckernels = pytest.mark.skipif(not ckernels.available(),
                                    reason=f"no C kernels: {ckernels.why_unavailable()}")


@pytest.fixture(autouse=True)
def fresh_kernel_cache(tmp_path, monkeypatch):
    """Every test measures afresh: its own, empty kernel-choice cache (imported by a test
    module, it applies to each of its tests)."""
    monkeypatch.setenv("STATIC_RUNTIME_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache"
