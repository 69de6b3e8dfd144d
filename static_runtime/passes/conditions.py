"""``fuse_scalar_compare``: a data-dependent condition, ``bool(x < c)`` for a tensor ``x`` and a
constant number ``c`` → one ``static_runtime::compare_scalar(x, c, "lt")`` node.

Scripted models branch and stop loops on a tensor's value: ``if x.mean() > 0:``, ``while
bool(delta > tol)``. TorchScript records each as ``aten::gt.Scalar`` then ``aten::Bool``:
the comparison makes a one-element tensor (the scalar is wrapped into a tensor and a
``TensorIterator`` built for one element, ~1.9 µs from Python) only for ``Bool`` to read it
back. The fused node compares ``x``'s one value in Python, with ATen's meaning
(``ops/native/conditions.py``), in ~0.2 µs — per iteration of the loop it stops.

Matched by schema and constants: ``aten::Bool.Tensor`` whose input is made by
``aten::{lt,le,gt,ge,eq,ne}.Scalar(x, c)`` with ``c`` a constant int, float or bool, that
comparison's output used by nothing else, both in one block. Anything else is left alone.
"""

from __future__ import annotations

import torch

from static_runtime.ir import types as T
from static_runtime.ir.graph import Graph, Node
from static_runtime.ir.own_ops import COMPARE_SCALAR
from static_runtime.passes.constant_propagation import constant_value

_BOOL = str(torch.ops.aten.Bool.Tensor._schema)
#: the comparison's schema → its name, the ``op`` of ``compare_scalar``
COMPARISONS = {str(getattr(torch.ops.aten, op).Scalar._schema): op
               for op in ("lt", "le", "gt", "ge", "eq", "ne")}


def fuse_scalar_compare(graph: Graph) -> bool:
    changed = False
    for node in list(graph.walk()):
        if node.schema == _BOOL and node.owning_block is not None:
            changed |= _fuse(graph, node)
    return changed


def _fuse(graph: Graph, to_bool: Node) -> bool:
    compare = to_bool.inputs[0].node
    if compare is None or compare.schema not in COMPARISONS \
            or compare.output.sole_user() is not to_bool \
            or compare.owning_block is not to_bool.owning_block:
        return False
    known, other = constant_value(compare.inputs[1])
    if not known or type(other) not in (int, float, bool):
        return False
    op = graph.constant(COMPARISONS[compare.schema], T.Str, before=to_bool)
    graph.replace_node(to_bool, "static_runtime::compare_scalar",
                       [compare.inputs[0], compare.inputs[1], op], schema=COMPARE_SCALAR,
                       remove=[to_bool, compare])
    return True
