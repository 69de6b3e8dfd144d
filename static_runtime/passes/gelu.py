"""``fuse_gelu``: GELU's tanh approximation written out — GPT-2's ``gelu_new``,
``0.5 · x · (1 + tanh(√(2/π) · (x + 0.044715 · x³)))`` — becomes ``aten::gelu(x,
approximate="tanh")``, one vectorised pass instead of eight operators (ORT's ``FastGelu``
fusion does the same).

Matched exactly, by schema and constants, anything else left alone::

    h = mul(x, 0.5)                        p = pow.Tensor_Scalar(x, 3)
    m = mul(p, 0.044715)                   a = add(x, m)
    s = mul(a, √(2/π))                     t = tanh(s)
    u = add(t, 1)                          y = mul(h, u)

``mul`` and ``add`` in either operand order, each constant a number or a 0-dim tensor
(``√(2/π)`` and ``0.044715`` to within 1e-6 relative, as models spell them with
``math.sqrt(2.0 / math.pi)`` or a literal), every intermediate used only inside. ATen's kernel
computes the same formula; the result differs by float rounding only.
"""

from __future__ import annotations

import math

import torch

from static_runtime.ir import types as T
from static_runtime.ir.graph import Graph, Node, Value
from static_runtime.passes.constant_propagation import constant_value as _constant

_aten = torch.ops.aten
_MULS = (str(_aten.mul.Tensor._schema), str(_aten.mul.Scalar._schema))
_POW = str(_aten.pow.Tensor_Scalar._schema)
_TANH = str(_aten.tanh.default._schema)
_GELU = str(_aten.gelu.default._schema)
_ADDS = ("static_runtime::add.Scalar", "static_runtime::add.Tensor")
_BETA = math.sqrt(2.0 / math.pi)
_KAPPA = 0.044715


def _number(value: Value) -> float | None:
    known, v = _constant(value)
    if not known:
        return None
    if isinstance(v, torch.Tensor):
        return float(v) if v.dim() == 0 and v.is_floating_point() else None
    return float(v) if type(v) in (int, float) else None


def _close(a: float | None, b: float) -> bool:
    return a is not None and abs(a - b) <= 1e-6 * abs(b)



def _by_number(node: Node, want: float) -> Value | None:
    """The operand of binary ``node`` whose other operand is the number ``want``."""
    a, b = node.inputs[:2]
    if _close(_number(b), want):
        return a
    if _close(_number(a), want):
        return b
    return None


def fuse_gelu(graph: Graph) -> bool:
    changed = False
    for node in list(graph.walk()):
        if node.schema == _TANH and node.owning_block is not None:
            changed |= _fuse_from(graph, node)
    return changed


def _fuse_from(graph: Graph, tanh: Node) -> bool:
    s = tanh.inputs[0].node
    if s is None or s.schema not in _MULS or s.output.sole_user() is not tanh:
        return False
    a_value = _by_number(s, _BETA)
    a = None if a_value is None else a_value.node
    if a is None or a.schema_name() not in _ADDS or a.output.sole_user() is not s:
        return False
    x = m = p = None
    for first, second in (a.inputs[:2], reversed(a.inputs[:2])):
        node = second.node
        if node is not None and node.schema in _MULS and second.sole_user() is a:
            cube = _by_number(node, _KAPPA)
            cube_node = None if cube is None else cube.node
            if cube_node is not None and cube_node.schema == _POW \
                    and cube_node.inputs[0] is first and _number(cube_node.inputs[1]) == 3.0 \
                    and cube_node.output.sole_user() is node:
                x, m, p = first, node, cube_node
                break
    if x is None:
        return False
    u = tanh.output.sole_user()
    if u is None or u.schema_name() not in _ADDS or _by_number(u, 1.0) is not tanh.output:
        return False
    y = u.output.sole_user()
    if y is None or y.schema not in _MULS:
        return False
    h_value = y.inputs[1] if y.inputs[0] is u.output else y.inputs[0]
    h = h_value.node
    if h is None or h.schema not in _MULS or _by_number(h, 0.5) is not x \
            or h_value.sole_user() is not y:
        return False
    nodes = (y, u, tanh, s, a, m, p, h)
    if any(n.owning_block is not y.owning_block for n in nodes):
        return False
    fused = graph.create("aten::gelu", [x, graph.constant("tanh", T.Str, before=y)],
                         output_types=[y.output.type])
    fused.schema, fused.source = _GELU, y.source
    fused.insert_before(y)
    name = y.output.name
    y.output.replace_all_uses_with(fused.output)
    for node in nodes:
        node.destroy()
    fused.output.set_name(name)
    return True

