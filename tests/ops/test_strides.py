"""The layout facts of ``ops/strides.py`` against PyTorch's own tensors."""

from __future__ import annotations

import pytest
import torch

from static_runtime.ops.strides import broadcasts_into, is_dense


@pytest.mark.parametrize("make,dense", [
    (lambda: torch.randn(2, 3, 4), True),
    (lambda: torch.randn(2, 4, 3).transpose(1, 2), True),
    (lambda: torch.randn(4, 1, 3).permute(2, 1, 0), True),
    (lambda: torch.randn(2, 1, 5), True),
    (lambda: torch.randn(2, 3, 8)[..., :4], False),  # a gap after every row
    (lambda: torch.randn(3, 1).expand(3, 4), False),  # one element read twice
    (lambda: torch.randn(6)[::2], False),
])
def test_is_dense(make, dense):
    x = make()
    assert is_dense(x.shape, x.stride()) is dense
    # (as PyTorch's own answer: a copy in x's order has x's strides exactly when x is dense)
    assert (torch.empty_like(x).stride() == x.stride()) is dense or x.shape[-1:] == (1,)


@pytest.mark.parametrize("sizes,shape,fits", [
    ((4,), (2, 3, 4), True), ((3, 1), (2, 3, 4), True), ((1, 1, 4), (2, 3, 4), True),
    ((2, 3, 4), (2, 3, 4), True), ((5,), (2, 3, 4), False), ((2, 2, 3, 4), (2, 3, 4), False),
])
def test_broadcasts_into(sizes, shape, fits):
    assert broadcasts_into(sizes, shape) is fits
    if fits:
        assert torch.broadcast_shapes(sizes, shape) == shape
