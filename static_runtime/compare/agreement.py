"""Whether runners' outputs agree with a reference runner's, and by how much they differ."""

from __future__ import annotations

from typing import Any

import torch
from torch.utils import _pytree as pytree

from static_runtime.compare.runner import Runner

# Tolerances of outputs_agree, also used to decide whether an ONNX export is faithful.
RTOL, ATOL = 1e-4, 1e-5


def _agree(got: Any, expected: Any) -> bool:
    try:
        torch.testing.assert_close(got, expected, rtol=RTOL, atol=ATOL)
    except AssertionError:
        return False
    return True


def _max_abs_error(got: Any, expected: Any) -> float | None:
    """The largest absolute difference between two outputs of the same structure (None if
    the structures or shapes differ)."""
    a, b = pytree.tree_leaves(got), pytree.tree_leaves(expected)
    if len(a) != len(b):
        return None
    worst = 0.0
    for x, y in zip(a, b):
        if isinstance(x, torch.Tensor) != isinstance(y, torch.Tensor):
            return None
        if isinstance(x, torch.Tensor):
            if x.shape != y.shape:
                return None
            if x.numel():
                worst = max(worst, (x.double() - y.double()).abs().max().item())
        elif x != y:
            return float("inf")
    return worst


def outputs_agree(runners: list[Runner], reference: str = "eager") -> dict[str, bool | None]:
    """Whether each runner's output equals the reference's (None where it cannot run)."""
    ref = next(r for r in runners if r.name == reference).fn()
    result: dict[str, bool | None] = {}
    for r in runners:
        if r.note:
            result[r.name] = None
            continue
        result[r.name] = _agree(r.fn(), ref)
    return result


def output_errors(runners: list[Runner], reference: str = "eager") -> dict[str, float | None]:
    """Each runner's largest absolute difference from the reference's output (None where it
    cannot run or its output has another structure)."""
    ref = next(r for r in runners if r.name == reference).fn()
    return {r.name: None if r.note else _max_abs_error(r.fn(), ref) for r in runners}
