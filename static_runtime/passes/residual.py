"""``fuse_linear_residual`` and ``fuse_conv_residual``: a product with a constant weight and a tensor added to it — a
transformer's output and down projections added back to the residual stream (LLaMA's have no
bias), a recurrence ``tanh(W h + U x)`` — become one ``static_runtime::linear_residual`` node
(``ir/own_ops.py``), with the activation that is the sum's only user. Matched by schema and
constants::

    y = aten::linear(x, W, b)            W a constant float32 2-D tensor, b one or None
    s = static_runtime::add(y, r)        either order; aten::add with alpha the constant 1 too
    a = act(s)                           optional: an activation ``linear_pointwise`` takes

with ``y`` (and ``s``, where ``a`` is taken) used only by the next. ``a`` (or ``s``) becomes
``linear_residual(x, W, b, r, attr)``, whose meaning is that composite (``ops/residual.py``):
where ``r`` broadcasts to the product's shape without widening it and is float32, our GEMM
adds it in its epilogue (one call, no pass over the sum for the add and the activation);
anything else runs the operators it replaced. With ``kernel_choice="measure"`` only — the
option that times our product against them (``StaticModuleOptions.passes_enabled``). It runs
before ``pack_linears`` and the linear fusions, which would take the product first.

``fuse_conv_residual`` does the same for a residual block's last convolution (ResNet's, and
every conv net with shortcuts), after ``channels_last`` has made it a fused convolution::

    y = static_runtime::conv2d_pointwise(x, W, b, stride, padding, dilation, groups, "none")
    s = static_runtime::add(y, r)        either order; aten::add with alpha the constant 1 too
    a = act(s)                           optional: an activation ``conv2d_pointwise`` takes

→ ``static_runtime::conv2d_residual(x, W, b, stride, padding, dilation, groups, r, attr)``
(``ops/conv_residual.py``): oneDNN's convolution with the add and the activation as post-ops,
or our implicit GEMM adding ``r`` before its activation, whichever measures faster; the
operators it replaced where ``r`` is not a channels-last tensor of the result's shape. Also
with ``kernel_choice="measure"`` only.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import torch

from static_runtime.ir import schema as S
from static_runtime.ir import types as T
from static_runtime.ir.graph import Graph, Node, Value
from static_runtime.ir.own_ops import (
    CONV2D_POINTWISE,
    CONV2D_RESIDUAL,
    LINEAR_RESIDUAL,
    SPECIALIZED_SCHEMAS,
)
from static_runtime.passes.constant_propagation import constant_value
from static_runtime.passes.effects import has_side_effects
from static_runtime.passes.fusion import _fusable_linear, _postop_attr

_LINEAR = str(torch.ops.aten.linear.default._schema)
_ADD = str(torch.ops.aten.add.Tensor._schema)
_OWN_ADD = SPECIALIZED_SCHEMAS["static_runtime::add.Tensor"]


def fuse_linear_residual(graph: Graph) -> bool:
    return _fuse_all(graph, _LINEAR_FUSION)


def fuse_conv_residual(graph: Graph) -> bool:
    return _fuse_all(graph, _CONV_FUSION)


class _Fusion(NamedTuple):
    """What one of the fusions takes and makes: ``takes(producer)``, whether the node that
    makes one side of the sum is one it fuses; ``postop(act)``, the ``attr`` of an activation
    after the sum (or None); ``kind`` and ``schema``, the node made; ``operands(producer)``,
    its inputs before the residual."""

    takes: Callable[[Node], bool]
    postop: Callable[[Node], str | None]
    kind: str
    schema: str
    operands: Callable[[Node], list[Value]]


_LINEAR_FUSION = _Fusion(
    lambda n: n.schema == _LINEAR and _fusable_linear(n, min_weight=1), _postop_attr,
    "static_runtime::linear_residual", LINEAR_RESIDUAL, lambda n: list(n.inputs))
_CONV_FUSION = _Fusion(
    lambda n: n.schema == CONV2D_POINTWISE and constant_value(n.inputs[7]) == (True, "none"),
    _postop_attr, "static_runtime::conv2d_residual", CONV2D_RESIDUAL,
    lambda n: list(n.inputs[:7]))


def _fuse_all(graph: Graph, fusion: _Fusion) -> bool:
    changed = False
    for node in list(graph.walk()):
        if node.owning_block is not None and _is_add(node):
            changed |= _fuse(graph, node, fusion)
    return changed


def _is_add(node: Node) -> bool:
    if node.schema == _OWN_ADD:
        return True
    if node.schema != _ADD or len(node.inputs) != 3:
        return False
    known, alpha = constant_value(node.inputs[2])
    return known and type(alpha) is int and alpha == 1


def _fuse(graph: Graph, add: Node, fusion: _Fusion) -> bool:
    for side in (0, 1):
        producer = add.inputs[side].node
        if producer.owning_block is not add.owning_block or not fusion.takes(producer) \
                or add.inputs[side].sole_user() is not add:  # (x + x: two uses)
            continue
        residual = add.inputs[1 - side]
        act = add.output.sole_user()
        attr = None
        if act is not None and act.owning_block is add.owning_block \
                and act.inputs[0] is add.output:
            attr = fusion.postop(act)
        last = act if attr is not None else add
        if not _nothing_written_between(producer, last):
            continue  # (the producer moves to the sum's place: its input must read the same)
        fused = graph.replace_node(
            last, fusion.kind,
            [*fusion.operands(producer), residual,
             graph.constant(attr or "none", T.Str, before=producer)],
            schema=fusion.schema, remove=(act, add, producer) if attr else (add, producer))
        fused.source = producer.source or add.source
        return True
    return False


def _nothing_written_between(first: Node, last: Node) -> bool:
    """Whether every node after ``first`` and before ``last`` (one block) writes nothing and
    has no blocks or effects of its own: moving ``first``'s reads to ``last`` reads the
    same values."""
    nodes = first.owning_block.nodes
    start, end = nodes.index(first), nodes.index(last)
    for node in nodes[start + 1:end]:
        if node.blocks or has_side_effects(node):
            return False
        if node.schema is None:
            if not node.kind.startswith("prim::"):  # (prims without a schema write nothing)
                return False
        elif S.parse(node.schema).writes_any_input():
            return False
    return start < end
