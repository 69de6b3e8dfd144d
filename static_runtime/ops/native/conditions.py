"""``static_runtime::compare_scalar(self, other, op)`` — ``bool(op(self, other))`` for a
constant number ``other`` (``passes/conditions.py``) — without making the comparison's tensor.

ATen compares ``self`` and a Python number in ``self``'s dtype when that is a floating one
(the number is rounded to it first: a float32 ``0.001`` is *not* greater than ``0.001`` in
ATen, though it is as Python floats), and in an integer ``self``'s own dtype for an int. So
the number is rounded to ``self``'s dtype once per dtype, and ``self``'s one value (exact as
a Python float or int) compared with it: every value of both is exact in Python's types,
so the comparison gives ATen's answer, NaN and infinities included. Where that does not
hold — an integer tensor and a float, an int outside the dtype's range, a complex or
unsigned-beyond-int64 dtype — and for a tensor of other than one element (``Bool``'s
error), the comparison runs as it did, through ATen.
"""

from __future__ import annotations

import operator

import torch

from static_runtime.ir.graph import Node
from static_runtime.ir.own_ops import COMPARE_SCALAR
from static_runtime.ops.registry import (
    SHAPE_MEANINGS,
    implement_torch_ops,
    labelled,
    register_native,
)
from static_runtime.ops.scalar_operands import PerDtype
from static_runtime.ops.selection import constant_value

_PYTHON = {"lt": operator.lt, "le": operator.le, "gt": operator.gt, "ge": operator.ge,
           "eq": operator.eq, "ne": operator.ne}
_ATEN = {name: getattr(torch, name) for name in _PYTHON}
_FLOATING = (torch.float16, torch.bfloat16, torch.float32, torch.float64)
_INTEGRAL = (torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64)


def as_compared(dtype: torch.dtype, other: float | bool) -> int | float | None:
    """``other`` as ATen compares it with a tensor of ``dtype``, as a Python number; None
    where comparing Python numbers would not give ATen's answer."""
    if dtype in _FLOATING:
        return torch.tensor(float(other), dtype=dtype).item()
    if dtype in _INTEGRAL and type(other) in (int, bool):
        info = torch.iinfo(dtype)
        return int(other) if info.min <= other <= info.max else None
    if dtype is torch.bool and type(other) in (int, bool):
        return int(other)
    return None


def compare_scalar_reference(self: torch.Tensor, other, op: str) -> bool:
    return bool(_ATEN[op](self, other))


@register_native("static_runtime::compare_scalar")
def _compare_scalar(node: Node):
    if node.schema != COMPARE_SCALAR:
        return None
    other, op = constant_value(node.inputs[1]), constant_value(node.inputs[2])
    if op not in _PYTHON or type(other) not in (int, float, bool):
        return None
    python, aten = _PYTHON[op], _ATEN[op]
    # dtype → ``other`` as compared with it (None: ATen compares)
    rounded = PerDtype(lambda dtype: as_compared(dtype, other))

    @labelled(f"bool(x {op} {other!r}) on x's one value")
    def compare_scalar(x, other_, op_):
        r = rounded[x.dtype]
        if r is None or x.numel() != 1 or other_ is not other and other_ != other:
            return bool(aten(x, other_))
        return python(x.item(), r)

    return compare_scalar


implement_torch_ops(((COMPARE_SCALAR, compare_scalar_reference),))


def _comparison_shapes(self, other):
    """A comparison's result metadata, for shape programs: a bool tensor laid out as ``add``
    of the two is (its meta function broadcasts over symbolic sizes where the comparisons'
    references raise: "SymIntArrayRef expected to contain only concrete integers", a causal
    mask ``kv_idx <= q_idx``). Of permuted operands PyTorch's meta functions may order the
    dimensions otherwise than its CPU kernel; a value the arena holds is then laid out
    otherwise than eager lays it out, with the same values (its out variant writes them)."""
    return torch.empty_like(torch.add(self, other), dtype=torch.bool)


SHAPE_MEANINGS.update({f"aten::{name}.Tensor": _comparison_shapes for name in _PYTHON})
