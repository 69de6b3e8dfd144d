"""The code cache (``runtime/codegen/cache.py``): code made once per key and shared, the least
recently used dropped beyond ``maxsize``, the generic code shared by every layout."""

from differential import script

import static_runtime as sr
from static_runtime.runtime.codegen import CodeCache

SRC = """
def f(x: torch.Tensor):
    return torch.tanh(torch.exp(x) * 2)
"""


def _plan():
    return sr.StaticModule(script(SRC)).plan


def test_code_is_made_once_per_key_and_the_oldest_dropped():
    codes = CodeCache(_plan(), "f", maxsize=2)
    a = codes.get(frozenset(), 1)
    assert codes.get(frozenset(), 1) is a and codes.generated == 1 and codes.latest is a
    codes.get(frozenset(), 2)
    codes.get(frozenset(), 3)  # drops layout 1's code
    assert codes.generated == 3
    assert codes.get(frozenset(), 1) is not a and codes.generated == 4


def test_generic_code_is_shared_and_the_recording_variant_kept_apart():
    codes = CodeCache(_plan(), "f")
    generic = codes.generic(frozenset())
    assert codes.generic(frozenset()) is generic
    recording = codes.generic(frozenset(), record=True)
    assert recording is not generic and "_rec[" in recording.source
    assert codes.latest is generic  # a recording call's code is not what ``mod.code`` shows
