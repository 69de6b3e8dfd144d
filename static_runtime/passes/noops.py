"""``remove_noops``: drop nodes that return their input, or a copy nobody can tell apart.

Removed (the output's uses read the input instead):

* ``aten::detach``: in inference a detached tensor is its input's data under another tensor
  object. Removed only when nothing writes either (``AliasDb.has_writers`` on their class):
  a metadata write (``t_``, ``resize_``) on one would not show on the other.
* ``aten::dropout``/``feature_dropout``/``alpha_dropout``/``feature_alpha_dropout`` with a
  constant ``train=False`` return their input (ATen returns the very same tensor). Removed
  only when neither the input nor the output has writers, so the rewrite can never let a
  later in-place op write into a graph input even if an implementation copied. Their
  in-place forms (``dropout_``) with ``train=False`` return their input by schema and are
  removed unconditionally.
* A list copy: ``aten::list.t(l)`` and ``aten::slice.t(l, None|0, None, 1)`` (``l[:]``).
  Removed only when neither the copy nor the source is changed as a list after the copy
  (``AliasDb.is_written_after(..., same_object=True)``: appends, item stores, clears...;
  writing a tensor *in* the list does not count, the copy is shallow) and the copy does not
  reach the caller (who could then tell the two lists apart).

Not no-ops, left alone: ``aten::contiguous`` (may copy, and the copy's strides differ),
``aten::to`` (whether the dtype already matches is not known statically).
"""

from __future__ import annotations

from static_runtime.ir import schema as S
from static_runtime.ir.graph import Graph, Node, Value
from static_runtime.passes.alias import AliasDb
from static_runtime.passes.constant_propagation import constant_value

DROPOUTS = frozenset({"aten::dropout", "aten::feature_dropout", "aten::alpha_dropout",
                      "aten::feature_alpha_dropout"})
DROPOUTS_INPLACE = frozenset(k + "_" for k in DROPOUTS)

_DETACH = "aten::detach(Tensor(a) self) -> Tensor(a)"
_LIST_COPY = "aten::list.t(t[] l) -> t[]"
_LIST_SLICE = "aten::slice.t(t[] l, int? start=None, int? end=None, int step=1) -> t[]"


def remove_noops(graph: Graph) -> bool:
    """Remove no-op nodes (see the module docstring); return whether any was removed."""
    changed = False
    progress = True
    while progress:  # removing one (dropout_) may clear the way for another
        progress = False
        db = AliasDb(graph)
        for node in list(graph.walk()):
            if node.owning_block is None:
                continue
            source = noop_source(node, db)
            if source is None:
                continue
            is_copy = node.kind in ("aten::list", "aten::slice")
            node.output.replace_all_uses_with(source)
            node.destroy()
            progress = changed = True
            if is_copy:
                # Two list classes merged. (Tensor removals merge classes that have no
                # writers, which keeps every later ``has_writers`` answer right.)
                db = AliasDb(graph)
    return changed


def noop_source(node: Node, db: AliasDb) -> Value | None:
    """The input ``node`` may be replaced by, or None if it must stay."""
    name = node.schema_name()
    if name is None or len(node.outputs) != 1:
        return None
    out = node.output
    if name == "aten::detach" and S.matches(node.schema, _DETACH):
        return None if db.has_writers(out) else node.inputs[0]
    if node.kind in DROPOUTS | DROPOUTS_INPLACE and _is_eval_dropout(node):
        src = node.inputs[0]
        if node.kind in DROPOUTS_INPLACE:
            return src
        return None if db.has_writers(src) or db.has_writers(out) else src
    if name in ("aten::list.t", "aten::slice.t") and _is_full_copy(node):
        src = node.inputs[0]
        if db.may_alias_graph_output(out):
            return None
        if db.is_written_after(out, node, same_object=True) or \
                db.is_written_after(src, node, same_object=True):
            return None
        return src
    return None


def _is_eval_dropout(node: Node) -> bool:
    if len(node.inputs) != 3:
        return False
    known, train = constant_value(node.inputs[2])
    return known and train is False


def _is_full_copy(node: Node) -> bool:
    if S.matches(node.schema, _LIST_COPY):
        return len(node.inputs) == 1
    if not S.matches(node.schema, _LIST_SLICE) or len(node.inputs) != 4:
        return False
    start, end, step = (constant_value(v) for v in node.inputs[1:])
    return (start[0] and start[1] in (None, 0) and not isinstance(start[1], bool)
            and end[0] and end[1] is None
            and step[0] and step[1] == 1 and not isinstance(step[1], bool))
