"""``functionalize``: replace an in-place operator by its functional form where nobody can
tell the difference, so the node can use an out variant and planned memory.

An in-place node is found by schema: ``ns::name_.overload(Tensor(a!) self, ...) ->
Tensor(a!)`` with no other annotation, whose functional twin ``ns::name.overload`` exists
with the same arguments (names, types, keyword-only-ness) and returns one unannotated
``Tensor``. Random operators are left alone.

``%o = aten::relu_(%v)`` becomes ``%w = aten::relu(%v)``; every use of ``%o``, and every use
of ``%v`` after the node, reads ``%w``.

Why that is safe, given the conditions checked (``AliasDb``):

1. ``%v`` is *fresh* (its node allocated it in this graph), aliases no graph input,
   constant, object state or graph output, and no list, tuple, dict or object may hold it
   (``AliasDb.may_be_contained``): no one outside the graph holds it, and no reader can reach
   it other than through the values in its alias class.
2. Every value in ``%v``'s alias class is ``%v`` itself or the output of an in-place write to
   the class (``Tensor(a!)`` in, the same set out): those are the same tensor object, never
   a view, never a container holding it. So every reader of the written data reads one of
   these values directly.
3. The node sits in the block that defines ``%v``, so it runs exactly once per definition
   of ``%v``, after every write that precedes it. Readers before it read the object
   unwritten by it, as before. Readers after it — of ``%v`` or of any in-place output defined
   before it, which all stand for the same object — now read ``%w``, which holds exactly what
   the object held after the write. Writers after it now write ``%w`` (the same argument
   applies to them in the next round); the old object is never read after the node.
4. The results are equal as values *and dtypes*: an in-place op keeps ``self``'s dtype, the
   functional one promotes. With ``self`` the only tensor argument (others are scalars) the
   promoted dtype equals ``self``'s whenever the in-place op succeeds (a scalar never
   promotes within its category, and a cross-category result cannot be cast back, so the
   in-place op would have raised). With other tensor arguments (``add_.Tensor``:
   ``float16 += float32`` stays ``float16`` in place but promotes functionally) the node is
   rewritten only when the IR types fix all their dtypes to ``self``'s.
"""

from __future__ import annotations

import functools

import torch

from static_runtime.ir import schema as S
from static_runtime.ir import types as T
from static_runtime.ir.graph import Graph, Node, Value
from static_runtime.passes.alias import AliasDb
from static_runtime.passes.effects import is_nondeterministic


@functools.cache
def functional_schema(inplace_schema: str) -> str | None:
    """The schema of the functional twin of an in-place operator, or None."""
    info = S.parse(inplace_schema)
    base = info.base_name
    if not base.endswith("_") or base.endswith("__") or not info.arguments:
        return None
    self_arg = info.arguments[0]
    if not (self_arg.type == "Tensor" and self_arg.is_write and len(self_arg.alias_sets) == 1):
        return None
    if any(a.is_write or a.alias_sets or a.after_sets for a in info.arguments[1:]):
        return None
    if len(info.returns) != 1:
        return None
    ret = info.returns[0]
    if ret.type != "Tensor" or ret.alias_sets != self_arg.alias_sets:
        return None
    try:
        packet = getattr(getattr(torch.ops, info.namespace), base[:-1])
        overload = getattr(packet, info.overload or "default")
    except (AttributeError, RuntimeError):
        return None
    text = str(overload._schema)
    cand = S.parse(text)
    if cand.has_alias_annotations() or cand.is_vararg != info.is_vararg:
        return None
    if len(cand.returns) != 1 or cand.returns[0].type != "Tensor":
        return None
    mine = [(a.name, a.type, a.kwarg_only) for a in info.arguments]
    theirs = [(a.name, a.type, a.kwarg_only) for a in cand.arguments]
    return text if mine == theirs else None


def functionalize(graph: Graph) -> bool:
    """Rewrite provably unobservable in-place nodes; return whether any was rewritten."""
    changed = False
    while True:
        db = AliasDb(graph)
        touched: set[object] = set()
        round_changed = False
        for node in list(graph.walk()):
            if node.owning_block is None or node.schema is None:
                continue
            schema = functional_schema(node.schema)
            if schema is None or is_nondeterministic(node):
                continue
            v = node.inputs[0]
            key = db.class_id(v)
            if key in touched or not _safe(node, v, db):
                continue
            touched.add(key)
            _rewrite(node, schema, db.alias_set(v))
            round_changed = True
        if not round_changed:
            return changed
        changed = True


def _safe(node: Node, v: Value, db: AliasDb) -> bool:
    if not isinstance(v.type, T.TensorType) or not db.knows(v):
        return False
    if not db.is_fresh(v) or db.may_alias_graph_input(v) or db.may_alias_graph_output(v):
        return False
    if db.may_be_contained(v):
        return False
    if node.owning_block is not v.node.owning_block:
        return False
    if not _dtypes_preserved(node, v):
        return False
    members = set(db.alias_set(v))
    return all(m is v or _is_inplace_output(m, members) for m in members)


def _is_inplace_output(m: Value, members: set[Value]) -> bool:
    """Whether ``m`` is the very object a node wrote (``Tensor(a!)`` in and out)."""
    producer = m.node
    if producer.schema is None:
        return False
    info = S.parse(producer.schema)
    if m.offset >= len(info.returns):
        return False
    sets = info.returns[m.offset].alias_sets
    if not sets:
        return False
    return any(a.is_write and a.alias_sets == sets and inp in members
               for inp, a in zip(producer.inputs, info.arguments))


def _dtypes_preserved(node: Node, v: Value) -> bool:
    info = S.parse(node.schema)
    for inp, arg in zip(node.inputs[1:], info.arguments[1:]):
        if "Tensor" not in arg.type:
            continue
        if arg.type == "Tensor?" and inp.type is T.NoneT:
            continue
        mine, theirs = v.type, inp.type
        if not (isinstance(mine, T.TensorType) and isinstance(theirs, T.TensorType)
                and mine.dtype is not None and mine.dtype == theirs.dtype):
            return False
    return True


def _rewrite(node: Node, schema: str, members: list[Value]) -> None:
    graph = node.graph
    kind = node.kind[:-1]
    new = graph.create(kind, list(node.inputs), output_types=[node.output.type])
    new.schema = schema
    new.source = node.source
    new.meta = dict(node.meta)
    new.insert_before(node)
    w = new.output
    name = node.output.name
    node.output.replace_all_uses_with(w)
    for m in members:
        if m is not node.output and m.node.is_before(node):
            m.replace_uses_after(node, w)
    node.destroy()
    w.set_name(name)
