"""Scalar arithmetic, comparisons and conversions, with TorchScript's semantics.

Only operators whose every argument is a Python scalar (int, float, bool, Scalar) are
claimed here; the rest go to the fallback (or, for list ``+``/``*``, to ``containers``).

TorchScript's scalars are C++ ``int64_t`` and ``double``, and its operators are C++
expressions (``torch/csrc/jit/runtime/register_prim_ops.cpp``), which differ from Python's
at the edges. Where they differ, these implementations follow TorchScript:

* ``int`` results wrap around at 64 bits (Python ints do not overflow);
* true division and float floor division / remainder follow IEEE: ``1.0 / 0.0`` is ``inf``,
  ``x % 0.0`` is ``nan``; only *integer* ``//`` and ``%`` by zero raise;
* float ``a // b`` is ``floor(a / b)`` and float ``a % b`` is ``fmod(b + fmod(a, b), b)``
  (Python computes both differently: ``1.0 // 0.1`` is 9.0 in Python, 10.0 in TorchScript);
* ``pow`` is C's ``pow``: ``(-8.0) ** (1/3)`` is ``nan`` (Python gives a complex number),
  overflow gives ``inf``; ``0 ** -1`` raises in both;
* ``min(a, b)`` is ``a < b ? a : b`` and ``max(a, b)`` is ``a > b ? a : b`` (they differ
  from Python's when a NaN is involved).

Which variant (integer or float semantics) a node gets is decided from its schema's argument
types; only ``Scalar``/``number`` arguments are looked at when the node runs.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Callable

import torch

from static_runtime.ir import schema as S
from static_runtime.ir.graph import Node
from static_runtime.ops.registry import register_native

_INT_TYPES = {"int", "bool"}
_DYNAMIC_TYPES = {"Scalar", "number"}
_SCALAR_TYPES = _INT_TYPES | _DYNAMIC_TYPES | {"float"}

_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1


def _wrap(r: int) -> int:
    """``r`` as a C++ ``int64_t`` computation would have it (two's complement wrap-around)."""
    if _INT64_MIN <= r <= _INT64_MAX:
        return r
    return (r - _INT64_MIN) % 2**64 + _INT64_MIN


def _true_div(a, b) -> float:
    a, b = float(a), float(b)
    try:
        return a / b
    except ZeroDivisionError:
        if a == 0.0 or math.isnan(a):
            return math.nan
        return math.copysign(math.inf, a) * math.copysign(1.0, b)


def _c_fmod(a: float, b: float) -> float:
    try:
        return math.fmod(a, b)
    except ValueError:  # fmod(x, 0) and fmod(inf, y): C returns NaN
        return math.nan


def _c_pow(a, b) -> float:
    a, b = float(a), float(b)
    if a == 0.0 and b < 0.0:
        raise ZeroDivisionError("0.0 cannot be raised to a negative power")
    try:
        return math.pow(a, b)
    except ValueError:  # negative base, non-integer exponent
        return math.nan
    except OverflowError:
        odd = b.is_integer() and b % 2 == 1
        return -math.inf if a < 0 and odd else math.inf


def _int_pow(a: int, b: int) -> int:
    if b < 0:
        raise RuntimeError("Integers to negative integer powers are not allowed.")
    r = pow(a, b, 1 << 64)  # (int64 arithmetic: a ** b wraps, and costs no huge int)
    return r - (1 << 64) if r >= 1 << 63 else r


def _int_floordiv(a: int, b: int) -> int:
    if b == 0:
        raise ZeroDivisionError("division by 0")
    return _wrap(a // b)


def _int_remainder(a: int, b: int) -> int:
    # TorchScript evaluates ``(b + a % b) % b`` in C++: dividing by zero is undefined there
    # (the process dies of SIGFPE); raising is the only safe answer.
    if b == 0:
        raise ZeroDivisionError("integer modulo by zero")
    return a % b


def _float_floordiv(a, b) -> float:
    q = _true_div(a, b)
    return float(math.floor(q)) if math.isfinite(q) else q


def _float_remainder(a, b) -> float:
    a, b = float(a), float(b)
    return _c_fmod(b + _c_fmod(a, b), b)


#: kind → (integer semantics, float semantics)
_BINARY: dict[str, tuple[Callable, Callable]] = {
    "aten::add": (lambda a, b: _wrap(a + b), operator.add),
    "aten::sub": (lambda a, b: _wrap(a - b), operator.sub),
    "aten::mul": (lambda a, b: _wrap(a * b), operator.mul),
    "aten::div": (_true_div, _true_div),
    "aten::floordiv": (_int_floordiv, _float_floordiv),
    "aten::remainder": (_int_remainder, _float_remainder),
    "aten::pow": (_c_pow, _c_pow),
    "aten::eq": (operator.eq, operator.eq), "aten::ne": (operator.ne, operator.ne),
    "aten::lt": (operator.lt, operator.lt), "aten::le": (operator.le, operator.le),
    "aten::gt": (operator.gt, operator.gt), "aten::ge": (operator.ge, operator.ge),
    "aten::__and__": (operator.and_, operator.and_),
    "aten::__or__": (operator.or_, operator.or_),
    "aten::__xor__": (operator.xor, operator.xor),
    # ``min(b, a)`` is ``a < b ? a : b``: Python's min keeps its first argument unless a
    # later one is smaller, hence the swapped order (it matters only for NaN).
    "prim::min": ((lambda a, b: min(b, a)),) * 2,
    "prim::max": ((lambda a, b: max(b, a)),) * 2,
}
_UNARY: dict[str, tuple[Callable, Callable]] = {
    "aten::neg": (lambda a: _wrap(-a), operator.neg),
    "prim::abs": (lambda a: _wrap(abs(a)), abs),
    "aten::abs": (lambda a: _wrap(abs(a)), abs),
}


def _scalar_schema(node: Node, n_args: int) -> S.SchemaInfo | None:
    if node.schema is None:
        return None
    info = S.parse(node.schema)
    if (len(info.arguments) == n_args and all(a.type in _SCALAR_TYPES for a in info.arguments)
            and len(info.returns) == 1 and info.returns[0].type in _SCALAR_TYPES):
        return info
    return None


def _semantics(info: S.SchemaInfo, int_fn: Callable, float_fn: Callable) -> Callable:
    """The integer or the float variant, chosen by the schema's argument types."""
    types = [a.type for a in info.arguments]
    if all(t in _INT_TYPES for t in types):
        return int_fn
    if "float" in types or int_fn is float_fn:
        return float_fn
    # ``Scalar``/``number`` arguments: the values decide, as TorchScript's ``Scalar`` ops do.
    if len(types) == 1:
        return lambda a: float_fn(a) if isinstance(a, float) else int_fn(a)
    return lambda a, b: (float_fn(a, b) if isinstance(a, float) or isinstance(b, float)
                         else int_fn(a, b))


def _with_result_type(info: S.SchemaInfo, fn: Callable, n_args: int) -> Callable:
    ret = info.returns[0].type
    if ret == "float":
        if n_args == 1:
            return lambda a: float(fn(a))
        return lambda a, b: float(fn(a, b))
    return fn  # int, bool and Scalar results already have the right Python type


def _binary_factory(kind: str, other: Callable[[Node], Callable | None] | None = None):
    int_fn, float_fn = _BINARY[kind]

    def factory(node: Node):
        info = _scalar_schema(node, 2)
        if info is None:
            return other(node) if other is not None else None
        if info.overload == "int_to_int":
            # aten::pow.int_to_int: an int (PyTorch's Python binding of it hands back a float,
            # which a size list then refuses: a DINOv2 export's ``(side // 8) ** 2``)
            return _int_pow
        return _with_result_type(info, _semantics(info, int_fn, float_fn), 2)

    return factory


def _unary_factory(kind: str):
    int_fn, float_fn = _UNARY[kind]

    def factory(node: Node):
        info = _scalar_schema(node, 1)
        if info is None:
            return None
        return _with_result_type(info, _semantics(info, int_fn, float_fn), 1)

    return factory


def _register_all() -> None:
    # List ``+`` and ``*`` share their kinds with the scalar operators; one factory per kind.
    from static_runtime.ops.native import containers

    shared = {"aten::add": containers.list_concat, "aten::mul": containers.list_repeat,
              "aten::eq": containers.list_compare, "aten::ne": containers.list_compare}
    for kind in _BINARY:
        register_native(kind)(_binary_factory(kind, shared.get(kind)))
    for kind in _UNARY:
        register_native(kind)(_unary_factory(kind))


_register_all()


def _float_to_int(x: float) -> int:
    # C++ ``static_cast<int64_t>`` of NaN, infinities and out-of-range values is undefined
    # (x86 gives INT64_MIN); refusing is better than a silently wrong number.
    if not math.isfinite(x) or not (_INT64_MIN <= x < 2.0**63):
        raise ValueError(f"cannot convert float {x} to a 64-bit integer")
    return int(x)


@register_native("aten::Int")
def _int(node: Node):
    if node.schema is None:
        return None
    arg = S.parse(node.schema).arguments[0].type
    if arg == "Tensor":
        return lambda t: int(t.item())
    if arg == "float":
        return _float_to_int
    if arg in ("int", "bool"):
        return int
    if arg in ("Scalar", "number"):  # what ``int(x.item())`` records
        fallback = torch.ops.aten.Int.Scalar

        def scalar_to_int(v):
            kind = type(v)
            if kind is float:
                return _float_to_int(v)
            return int(v) if kind is int or kind is bool else fallback(v)

        return scalar_to_int
    return None  # str: the fallback


@register_native("aten::Float")
def _float(node: Node):
    if node.schema is None:
        return None
    arg = S.parse(node.schema).arguments[0].type
    if arg == "Tensor":
        return lambda t: float(t.item())
    if arg in ("int", "bool", "float", "Scalar"):
        return float
    return None  # str: the fallback


@register_native("aten::Bool")
def _bool(node: Node):
    if node.schema is None:
        return None
    arg = S.parse(node.schema).arguments[0].type
    if arg == "Tensor":
        return lambda t: bool(t.item())
    if arg in ("int", "float", "bool"):
        return bool
    return None


@register_native("aten::item")
def _item(node: Node):
    # the tensor's one value as a Python number of its kind (float, int, bool, complex), as
    # TorchScript's Scalar holds it; ``torch.ops.aten.item`` costs ~0.9 µs against 0.1
    return lambda t: t.item()


@register_native("aten::ScalarImplicit")
def _scalar_implicit(node: Node):
    return lambda t: t.item()


@register_native("aten::size")
def _size(node: Node):
    if node.schema is None:
        return None
    types = [a.type for a in S.parse(node.schema).arguments]
    if types == ["Tensor"]:
        return lambda t: list(t.shape)
    if types == ["Tensor", "int"]:
        return lambda t, d: t.size(d)
    return None


@register_native("aten::dim")
def _dim(node: Node):
    return lambda t: t.dim()
