"""``variadic_cat_stack``: ``cat``/``stack`` of a list built in the graph → one node taking the
tensors directly, so no list is built per call (the seed's ``UseVariadicCat``/``Stack``).

``%l = prim::ListConstruct(%a, %b); %y = aten::cat(%l, %dim)`` becomes
``%y = prim::VarConcat(%a, %b, %dim)`` (``aten::stack`` → ``prim::VarStack``; both are
registered in ``ops/out_variants.py``: inputs are the tensors, then the dimension).

Only when the list is a ``prim::ListConstruct`` (so its elements are known) that is never
changed as a list (``AliasDb.has_writers(..., same_object=True)``: no ``append``,
``_set_item``, ``clear``... on it or anything that may alias it; in-place writes to the tensors
themselves do not matter, the variadic node reads the same tensors). The
``ListConstruct`` is removed when nothing else uses it.
"""

from __future__ import annotations

from static_runtime.ir import schema as S
from static_runtime.ir.graph import Graph, Node
from static_runtime.passes.alias import AliasDb

#: Functional schema → the variadic kind replacing it.
VARIADIC = {
    "aten::cat(Tensor[] tensors, int dim=0) -> Tensor": "prim::VarConcat",
    "aten::stack(Tensor[] tensors, int dim=0) -> Tensor": "prim::VarStack",
}


def variadic_cat_stack(graph: Graph) -> bool:
    """Rewrite eligible ``cat``/``stack`` nodes; return whether any was rewritten."""
    db = AliasDb(graph)
    changed = False
    for node in list(graph.walk()):
        kind = _variadic_kind(node)
        if kind is None or len(node.inputs) != 2:
            continue
        lst = node.inputs[0]
        if lst.node.kind != "prim::ListConstruct" or not lst.node.inputs:
            continue
        if db.has_writers(lst, same_object=True):
            continue
        graph.replace_node(node, kind, [*lst.node.inputs, node.inputs[1]])
        if not lst.uses:
            lst.node.destroy()
        changed = True
    return changed


def _variadic_kind(node: Node) -> str | None:
    if node.kind not in ("aten::cat", "aten::stack") or node.schema is None:
        return None
    for schema, kind in VARIADIC.items():
        if S.matches(node.schema, schema):
            return kind
    return None

