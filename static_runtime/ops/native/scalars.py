"""Scalar arithmetic, comparisons and conversions, with TorchScript's semantics.

Only operators whose every argument is a Python scalar (int, float, bool, Scalar) are
claimed here; the rest go to the fallback."""

from __future__ import annotations

import math
import operator

import torch

from static_runtime.ir.graph import Node
from static_runtime.ops import schema as S
from static_runtime.ops.registry import register_native

_SCALAR_TYPES = {"int", "float", "bool", "Scalar", "number"}

_BINARY = {
    "aten::add": operator.add, "aten::sub": operator.sub, "aten::mul": operator.mul,
    "aten::div": operator.truediv, "aten::floordiv": operator.floordiv,
    "aten::remainder": operator.mod, "aten::pow": operator.pow,
    "aten::eq": operator.eq, "aten::ne": operator.ne, "aten::lt": operator.lt,
    "aten::le": operator.le, "aten::gt": operator.gt, "aten::ge": operator.ge,
    "aten::__and__": operator.and_, "aten::__or__": operator.or_,
    "aten::__xor__": operator.xor, "prim::min": min, "prim::max": max,
}
_UNARY = {"aten::neg": operator.neg, "prim::abs": abs, "aten::abs": abs}


def _scalar_only(node: Node, n_args: int) -> bool:
    if node.schema is None:
        return False
    info = S.parse(node.schema)
    return (len(info.arguments) == n_args
            and all(a.type in _SCALAR_TYPES for a in info.arguments)
            and len(info.returns) == 1 and info.returns[0].type in _SCALAR_TYPES)


def _result_cast(node: Node):
    ret = S.parse(node.schema).returns[0].type
    return {"float": float, "int": int, "bool": bool}.get(ret)


def _binary_factory(kind: str):
    op = _BINARY[kind]

    def factory(node: Node):
        if not _scalar_only(node, 2):
            return None
        cast = _result_cast(node)
        if kind in ("aten::div", "aten::floordiv", "aten::remainder"):
            def checked(a, b):
                if b == 0:
                    raise ZeroDivisionError(
                        "division by zero" if kind != "aten::remainder" else "modulo by zero")
                return op(a, b)

            fn = checked
        else:
            fn = op
        if cast is None or kind in ("aten::add", "aten::sub", "aten::mul") and \
                S.parse(node.schema).returns[0].type == "Scalar":
            return fn
        return lambda a, b: cast(fn(a, b))

    return factory


def _unary_factory(kind: str):
    op = _UNARY[kind]

    def factory(node: Node):
        if not _scalar_only(node, 1):
            return None
        return op

    return factory


for _k in _BINARY:
    register_native(_k)(_binary_factory(_k))
for _k in _UNARY:
    register_native(_k)(_unary_factory(_k))


@register_native("aten::Int")
def _int(node: Node):
    if node.schema and "(Tensor a)" in node.schema:
        return lambda t: int(t.item())
    if node.schema and "(float a)" in node.schema:
        def to_int(x):
            if math.isnan(x) or math.isinf(x):
                raise ValueError(f"cannot convert float {x} to integer")
            return int(x)

        return to_int
    return None


@register_native("aten::Float")
def _float(node: Node):
    if node.schema and ("(Tensor a)" in node.schema or "(int a)" in node.schema
                        or "(bool a)" in node.schema or "(Scalar a)" in node.schema):
        return lambda x: float(x.item() if isinstance(x, torch.Tensor) else x)
    return None


@register_native("aten::Bool")
def _bool(node: Node):
    if node.schema and ("(Tensor a)" in node.schema or "(int a)" in node.schema
                        or "(float a)" in node.schema):
        return lambda x: bool(x.item() if isinstance(x, torch.Tensor) else x)
    return None


@register_native("aten::ScalarImplicit")
def _scalar_implicit(node: Node):
    return lambda t: t.item()


@register_native("aten::size")
def _size(node: Node):
    if node.schema is None:
        return None
    if node.schema.startswith("aten::size(Tensor self) -> int[]"):
        return lambda t: list(t.shape)
    if node.schema.startswith("aten::size.int(Tensor self, int dim)"):
        return lambda t, d: t.size(d)
    return None


@register_native("aten::dim")
def _dim(node: Node):
    return lambda t: t.dim()
