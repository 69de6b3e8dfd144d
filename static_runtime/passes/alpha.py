"""``specialize_alpha``: ``add``/``sub`` with the constant ``alpha=1`` → an alpha-less node.

``aten::add.Tensor(self, other, alpha)``, ``aten::add.Scalar``, and the same for ``sub``,
become ``static_runtime::add``/``static_runtime::sub`` with inputs ``(self, other)`` and the
schema of ``ops/native/specialized.py`` (which runs them as ``torch.add(a, b)``: one fewer
argument to bind and convert per call, and the fastest binding).

Only for exactly those schemas (not ``add.t`` on lists, ``add.int`` on scalars or the ``out``
forms), and only when ``alpha`` is the int constant ``1``: ``alpha=1.0`` on integer tensors
raises in ATen, which the alpha-less call would not. ``torch.add(a, b)`` and
``torch.add(a, b, alpha=1)`` give the same values and dtype.
"""

from __future__ import annotations

from static_runtime.ir import schema as S
from static_runtime.ir.graph import Graph, Node
from static_runtime.ir.own_ops import SPECIALIZED_SCHEMAS
from static_runtime.passes.constant_propagation import constant_value

#: Schema of the rewritable node → the overload replacing it.
SPECIALIZE = {
    "aten::add.Tensor(Tensor self, Tensor other, *, Scalar alpha=1) -> Tensor":
        "static_runtime::add.Tensor",
    "aten::add.Scalar(Tensor self, Scalar other, Scalar alpha=1) -> Tensor":
        "static_runtime::add.Scalar",
    "aten::sub.Tensor(Tensor self, Tensor other, *, Scalar alpha=1) -> Tensor":
        "static_runtime::sub.Tensor",
    "aten::sub.Scalar(Tensor self, Scalar other, Scalar alpha=1) -> Tensor":
        "static_runtime::sub.Scalar",
}


def specialize_alpha(graph: Graph) -> bool:
    """Rewrite every eligible ``add``/``sub``; return whether any was rewritten."""
    changed = False
    for node in list(graph.walk()):
        target = _target(node)
        if target is None:
            continue
        kind, schema = target
        graph.replace_node(node, kind, node.inputs[:2], schema=schema)
        changed = True
    return changed


def _target(node: Node) -> tuple[str, str] | None:
    if node.kind not in ("aten::add", "aten::sub") or node.schema is None:
        return None
    if len(node.inputs) != 3 or len(node.outputs) != 1:
        return None
    known, alpha = constant_value(node.inputs[2])
    if not known or type(alpha) is not int or alpha != 1:
        return None
    for schema, overload in SPECIALIZE.items():
        if S.matches(node.schema, schema):
            return overload.split(".")[0], SPECIALIZED_SCHEMAS[overload]
    return None
