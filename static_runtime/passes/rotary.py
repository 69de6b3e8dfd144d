"""``fuse_rotary``: rotary position embeddings applied to a query or key — LLaMA's
``q * cos + rotate_half(q) * sin`` — become one ``static_runtime::rotary`` node
(``ir/own_ops.py``). Matched by schema and constants::

    x2 = aten::slice(x, dim, half, END, 1)     END: None or the largest int64
    n  = aten::neg(x2)
    x1 = aten::slice(x, dim, START, half, 1)   START: None or 0; ``half``, ``dim`` the same
    r  = prim::VarConcat(n, x1, cat_dim)       ``dim``, ``cat_dim`` constants (a trace
                                               spells the last dimension 3, and -1 in cat)
    a  = aten::mul.Tensor(x, cos)              either order
    b  = aten::mul.Tensor(r, sin)              either order
    y  = static_runtime::add(a, b)             either order; aten::add with alpha 1 too

with every intermediate used only inside the pattern and nothing written between its first
node and the sum (the fused node reads ``x``, ``cos`` and ``sin`` where the sum was).
``half`` may be a constant or a value the graph computes (``x.size(-1) // 2``). It means that
composite (``ops/rotary.py``), whose measured kernel computes ``x * cos`` as ATen does and
adds the rotated half times ``sin`` in one pass: six operators, four tensors made, become
two and one. With ``kernel_choice="measure"`` only.
"""

from __future__ import annotations

import torch

from static_runtime.ir import types as T
from static_runtime.ir.graph import Graph, Node, Value
from static_runtime.ir.own_ops import ROTARY
from static_runtime.passes.constant_propagation import constant_value
from static_runtime.passes.residual import _is_add, _nothing_written_between

_SLICE = str(torch.ops.aten.slice.Tensor._schema)
_NEG = str(torch.ops.aten.neg.default._schema)
_MUL = str(torch.ops.aten.mul.Tensor._schema)
_INT64_MAX = 2 ** 63 - 1


def fuse_rotary(graph: Graph) -> bool:
    changed = False
    for node in list(graph.walk()):
        if node.owning_block is not None and _is_add(node):
            changed |= _fuse(graph, node)
    return changed


def _constant(value: Value, *allowed) -> bool:
    known, v = constant_value(value)
    return known and any(v is a if a is None else (type(v) is int and v == a) for a in allowed)


def _slice_of(value: Value, block) -> Node | None:
    """``value``'s defining ``slice`` along a constant dimension with step 1, in ``block``,
    used only once."""
    node = value.node
    if node.schema != _SLICE or node.owning_block is not block or len(node.inputs) != 5 \
            or value.sole_user() is None or _int(node.inputs[1]) is None \
            or not _constant(node.inputs[4], 1):
        return None
    return node


def _int(value: Value) -> int | None:
    known, v = constant_value(value)
    return v if known and type(v) is int else None


def _rotated(r: Value, block) -> tuple[Value, Value, int, int, list[Node]] | None:
    """``(x, half, dim, cat_dim, nodes)`` if ``r`` is ``cat([-x.slice(dim, half),
    x.slice(dim, 0, half)], cat_dim)``."""
    cat = r.node
    if cat.kind != "prim::VarConcat" or cat.owning_block is not block \
            or len(cat.inputs) != 3 or _int(cat.inputs[2]) is None \
            or r.sole_user() is None:
        return None
    neg = cat.inputs[0].node
    if neg.schema != _NEG or neg.owning_block is not block or cat.inputs[0].sole_user() is None:
        return None
    upper, lower = _slice_of(neg.inputs[0], block), _slice_of(cat.inputs[1], block)
    if upper is None or lower is None:
        return None
    x, half = upper.inputs[0], upper.inputs[2]
    if lower.inputs[0] is not x or _int(lower.inputs[1]) != _int(upper.inputs[1]) \
            or (lower.inputs[3] is not half and not _same_constant(lower.inputs[3], half)) \
            or not _constant(upper.inputs[3], None, _INT64_MAX) \
            or not _constant(lower.inputs[2], None, 0):
        return None
    return x, half, _int(upper.inputs[1]), _int(cat.inputs[2]), [upper, neg, lower, cat]


def _same_constant(a: Value, b: Value) -> bool:
    known_a, va = constant_value(a)
    known_b, vb = constant_value(b)
    return known_a and known_b and type(va) is int and type(vb) is int and va == vb


def _fuse(graph: Graph, add: Node) -> bool:
    block = add.owning_block
    for side in (0, 1):
        straight, turned = add.inputs[side].node, add.inputs[1 - side].node
        if straight.schema != _MUL or turned.schema != _MUL \
                or straight.owning_block is not block or turned.owning_block is not block \
                or add.inputs[side].sole_user() is not add \
                or add.inputs[1 - side].sole_user() is not add:
            continue
        for k in (0, 1):
            found = _rotated(turned.inputs[k], block)
            if found is None:
                continue
            x, half, dim, cat_dim, nodes = found
            sin = turned.inputs[1 - k]
            for j in (0, 1):
                if straight.inputs[j] is not x:
                    continue
                cos = straight.inputs[1 - j]
                pattern = [*nodes, straight, turned]
                first = min(pattern, key=block.nodes.index)
                if not _nothing_written_between(first, add):
                    continue
                fused = graph.replace_node(add, "static_runtime::rotary", [
                    x, cos, sin, half, graph.constant(dim, T.Int, before=add),
                    graph.constant(cat_dim, T.Int, before=add)],
                                           schema=ROTARY,
                                           remove=(add, turned, straight, *reversed(nodes)))
                fused.source = add.source
                return True
    return False
