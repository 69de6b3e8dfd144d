"""``fuse_scaled_index_add``: a weighted scatter-add — a mixture of experts adding each
expert's output, weighted by its routing weights, back at its tokens' rows (Mixtral's
``out.index_add_(0, rows, y * w[rows, slot, None])``) — becomes one
``static_runtime::index_add_scaled_`` node (``ir/own_ops.py``). Matched by schema and
constants::

    s = aten::unsqueeze(scale, -1)
    p = aten::mul.Tensor(source, s)       either order
    r = aten::index_add_(self, 0, index, p, 1)

with ``s`` and ``p`` used only by the next and nothing written between the first of them and
the scatter (the fused node reads ``source`` and ``scale`` where the scatter was). It means
``self.index_add_(0, index, source * scale.unsqueeze(-1))`` (``ops/scatter.py``), whose
measured kernel multiplies each row by its weight as it adds it — one pass, no product
tensor made; any other shape runs those operators. With ``kernel_choice="measure"`` only.
"""

from __future__ import annotations

import torch

from static_runtime.ir.graph import Graph, Node
from static_runtime.ir.own_ops import INDEX_ADD_SCALED
from static_runtime.passes.constant_propagation import constant_value
from static_runtime.passes.residual import _nothing_written_between

_INDEX_ADD = str(torch.ops.aten.index_add_.default._schema)
_MUL = str(torch.ops.aten.mul.Tensor._schema)
_UNSQUEEZE = str(torch.ops.aten.unsqueeze.default._schema)


def fuse_scaled_index_add(graph: Graph) -> bool:
    changed = False
    for node in list(graph.walk()):
        if node.owning_block is not None and node.schema == _INDEX_ADD:
            changed |= _fuse(graph, node)
    return changed


def _is_constant(value, expected: int) -> bool:
    known, v = constant_value(value)
    return known and type(v) is int and v == expected


def _fuse(graph: Graph, scatter: Node) -> bool:
    if len(scatter.inputs) != 5 or not _is_constant(scatter.inputs[1], 0) \
            or not _is_constant(scatter.inputs[4], 1):
        return False
    target, _, index, product, _ = scatter.inputs
    mul = product.node
    block = scatter.owning_block
    if mul.schema != _MUL or mul.owning_block is not block or product.sole_user() is not scatter:
        return False
    for side in (0, 1):
        weights = mul.inputs[side]
        unsqueeze = weights.node
        if unsqueeze.schema != _UNSQUEEZE or unsqueeze.owning_block is not block \
                or weights.sole_user() is not mul or mul.inputs[1 - side] is weights \
                or not _is_constant(unsqueeze.inputs[1], -1):
            continue
        source, scale = mul.inputs[1 - side], unsqueeze.inputs[0]
        nodes = block.nodes
        first = unsqueeze if nodes.index(unsqueeze) < nodes.index(mul) else mul
        if not _nothing_written_between(first, scatter):
            continue
        fused = graph.replace_node(scatter, "static_runtime::index_add_scaled_",
                                   [target, index, source, scale], schema=INDEX_ADD_SCALED,
                                   remove=(scatter, mul, unsqueeze))
        fused.source = scatter.source
        return True
    return False
