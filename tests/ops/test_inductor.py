"""``compile_graph``: Inductor as a library. (Regions compiled through it:
``tests/runtime/test_fused_regions.py``.)"""

from __future__ import annotations

import pytest
import torch

from static_runtime.ops import inductor

pytestmark = pytest.mark.skipif(inductor.compiler_available() is not None,
                                reason=str(inductor.compiler_available()))


def _f(a: torch.Tensor, e: torch.Tensor) -> tuple:
    return (torch.tanh(a * e) + a,)


def test_the_code_is_compiled_for_the_strides_the_inputs_have():
    # a slice (not dense), a tensor expanded from one row (stride 0), at a storage offset
    base = torch.randn(5, 12)
    a, e = base[:, 3:7], torch.randn(4).expand(5, 4)
    compiled = inductor.compile_graph(_f, [a, e])
    (out,) = compiled.call([a, e])
    torch.testing.assert_close(out, _f(a, e)[0])
    # it asserts those strides: a dense input is not what it was compiled for
    with pytest.raises(AssertionError, match="stride"):
        compiled.call([a.contiguous(), e])
