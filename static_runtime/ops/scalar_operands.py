"""Tensor–number operators whose number is a constant — ``x * 0.5``, ``x / 8``, ``x + 1``,
``1 - x``, ``x > 0`` — called with the number as a 0-dim tensor made once.

PyTorch's Python bindings take a tensor where the schema has a ``Scalar`` here, so
``torch.mul(x, 0.5)`` wraps the number into a new tensor on every call: 2.1 µs for a 1 × 32
``x``, against 1.05 µs for ``torch.mul(x, c)`` with ``c`` made beforehand (the C++ runtimes
wrap it too, but without the Python binding's cost). ATen defines each of these overloads as
the tensor overload on the wrapped number, so the result is the same when ``c`` gives the
same type promotion and the same value:

* a wrapped number never decides the result's dtype within its category, a 0-dim tensor of
  ``x``'s own dtype does not either (for a 0-dim ``x`` too: the two promote to that dtype);
* the kernel reads either as the same number: ``x``'s dtype is float32 or float64 (where the
  number is rounded to it, as the wrapped double is for the kernel), or an integer dtype and
  an int in its range.

Anything else — float16 and bfloat16 (their kernels compute in float32 from the unrounded
number), an integer ``x`` and a float (promoted to the default dtype), bool, complex — and
a number that is not a constant run the operator as the binding does.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from static_runtime.ir.graph import Node
from static_runtime.ops.registry import labelled, register_out_variant
from static_runtime.ops.selection import constant_value

_aten = torch.ops.aten
#: schema → (the Python function, whether ``alpha`` — its third input — must be the int 1).
#: The ``.Tensor`` overloads too: an exported program gives them a number (``x * 0.5`` is
#: ``aten.mul.Tensor(x, 0.5)`` there), which the binding wraps the same way.
SCHEMAS: dict[str, tuple[Callable[..., Any], bool]] = {
    str(getattr(_aten, op).__getattr__(overload)._schema): (getattr(torch, op), op == "rsub")
    for op in ("mul", "div", "rsub", "lt", "le", "gt", "ge", "eq", "ne")
    for overload in ("Scalar", "Tensor")
}
_FLOATING = (torch.float32, torch.float64)
_INTEGRAL = (torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64)
_INT64 = torch.iinfo(torch.int64)


def operand(dtype: torch.dtype, value: Any) -> torch.Tensor | None:
    """``value`` as the 0-dim tensor that gives a tensor of ``dtype`` what the wrapped
    number gives it, or None where there is none (see the module's docstring)."""
    kind = type(value)
    if dtype in _FLOATING and (kind is float or kind is int and _INT64.min <= value
                               <= _INT64.max):
        return torch.tensor(value, dtype=dtype)
    if dtype in _INTEGRAL and kind is int:
        info = torch.iinfo(dtype)
        if info.min <= value <= info.max:
            return torch.tensor(value, dtype=dtype)
    return None


class PerDtype(dict):
    """dtype → ``make(dtype)``, made on the first lookup of that dtype (one dict lookup per
    call after it)."""

    def __init__(self, make: Callable[[torch.dtype], Any]):
        super().__init__()
        self.make = make

    def __missing__(self, dtype: torch.dtype) -> Any:
        made = self[dtype] = self.make(dtype)
        return made


def _rsub_out(self, other, out):
    # ``torch.rsub`` takes no ``out=``; ``other - self`` is ``sub(other, self)``, which
    # promotes a 0-dim ``other`` of ``self``'s dtype as rsub does
    if isinstance(other, torch.Tensor):
        return torch.sub(other, self, out=out)
    return out.copy_(torch.rsub(self, other))


def constant_operand_pair(op: Callable[..., Any], value: Any, name: str
                          ) -> tuple[Callable[..., Any], Callable[..., Any]]:
    """``(fn, out_fn)`` running ``op(self, value[, out=])`` with ``value`` as a tensor made
    once per dtype of ``self``. ``fn(self, other, *rest)``, ``out_fn(out, self, other,
    *rest)``: ``other`` (and an ``alpha`` of 1) are the node's constants, read from the
    table instead."""
    # dtype → the operand for that dtype (None: the number as given)
    operands = PerDtype(lambda dtype: operand(dtype, value))

    @labelled(f"torch.{name}(self, {value!r} as a tensor made once)")
    def fn(self, other, *rest):
        c = operands[self.dtype]
        return op(self, other) if c is None else op(self, c)

    if op is torch.rsub:
        @labelled(f"torch.sub({value!r} as a tensor made once, self, out=)")
        def out_fn(out, self, other, *rest):
            c = operands[self.dtype]
            return _rsub_out(self, other if c is None else c, out)
    else:
        @labelled(f"torch.{name}(self, {value!r} as a tensor made once, out=)")
        def out_fn(out, self, other, *rest):
            c = operands[self.dtype]
            return op(self, other, out=out) if c is None else op(self, c, out=out)

    fn.operands = out_fn.operands = operands  # type: ignore[attr-defined]
    return fn, out_fn


def constant_number(node: Node, alpha: bool) -> Any:
    """The node's second input if it is a constant number (not a tensor), else
    NotImplemented; with ``alpha``, also NotImplemented unless its third is the int 1."""
    value = constant_value(node.inputs[1])
    if type(value) not in (int, float):
        return NotImplemented
    if alpha:
        a = constant_value(node.inputs[2]) if len(node.inputs) == 3 else NotImplemented
        if type(a) is not int or a != 1:
            return NotImplemented
    return value


def _factory(node: Node):
    found = SCHEMAS.get(node.schema or "")
    if found is None:
        return None
    op, alpha = found
    value = constant_number(node, alpha)
    if value is NotImplemented:
        return None
    return constant_operand_pair(op, value, op.__name__)


for _kind in sorted({f"aten::{s.split('::')[1].split('.')[0]}" for s in SCHEMAS}):
    register_out_variant(_kind)(_factory)
