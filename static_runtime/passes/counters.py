"""``scalarize_loop_counters``: a loop counter kept in a 0-dim int64 tensor becomes a Python int.

``torch.export``'s ``while_loop`` carries only tensors, so a counted loop
(``while_loop(lambda i, h: i < n, lambda i, h: (i + 1, ...), (torch.zeros((), dtype=int64), h))``)
arrives as a ``prim::Loop`` whose counter is a 0-dim int64 tensor: every trip pays a tensor
``add`` for the increment and a tensor comparison plus ``Bool`` for the test — about 8 µs of
operator calls for what is integer arithmetic. This pass carries the counter as an int:

* the loop-carried value's initial value is a constant 0-dim int64 CPU tensor ``v0``;
* the body's next value is ``p + c`` (``add.Tensor``, alpha 1) of the body's parameter ``p``
  and a constant int ``c``;
* the loop's final value of the counter is unused;
* nothing in the body writes any tensor (no schema with ``!``), so no write through a view
  of the counter, or of the tensor rebuilt for a use, can be missed.

Then ``p`` and each ``p + c'`` in the body become ints (``aten::add.int``); a comparison
``lt/le/gt/ge/eq/ne.Scalar`` of one of them with an int, used only through ``aten::Bool``,
becomes the int comparison; every other use (``mul(h, i + 1)``...) gets the tensor back, made
by ``aten::scalar_tensor(v, dtype=int64)`` where the int is made — the same value, dtype,
shape and device it had, so that use computes exactly what it did. The loop's entry test
``Bool(lt.Scalar(v0, n))`` on the constant is rewritten the same way.

Exactness: int64 tensor arithmetic wraps at 2**63, Python ints do not. With ``|v0|`` and
``|c|`` at most 2**31 (required), a difference needs more than 2**32 trips; and a comparison
with an int beyond int64 raises in ATen where the int comparison answers (the binder checks
symbolic ints against their exported range).
"""

from __future__ import annotations

import torch

from static_runtime.ir import types as T
from static_runtime.ir.graph import RETURN, Block, Graph, Node, Value
from static_runtime.passes.constant_propagation import constant_value

_ADD = str(torch.ops.aten.add.Tensor._schema)
_ADD_NO_ALPHA = "static_runtime::add.Tensor(Tensor self, Tensor other) -> Tensor"
_BOOL = str(torch.ops.aten.Bool.Tensor._schema)
_SCALAR_TENSOR = str(torch.ops.aten.scalar_tensor.default._schema)
_ADD_INT = str(torch.ops.aten.add.int._schema)
#: comparison of a tensor with a Scalar → (kind, schema) of the int comparison
_COMPARE = {
    str(getattr(torch.ops.aten, name).Scalar._schema):
        (f"aten::{name}", str(getattr(torch.ops.aten, name).int._schema))
    for name in ("lt", "le", "gt", "ge", "eq", "ne")
}
_LIMIT = 1 << 31


def scalarize_loop_counters(graph: Graph) -> bool:
    changed = False
    for node in list(graph.walk()):
        if node.kind == "prim::Loop" and node.owning_block is not None:
            for j in reversed(range(len(node.outputs))):
                changed |= _scalarize(graph, node, j)
    for node in list(graph.walk()):
        if node.owning_block is not None and node.schema in _COMPARE:
            changed |= _int_compare(graph, node, None)
    return changed


def _small_int_tensor(value: Value) -> tuple[bool, int | None]:
    """Whether ``value`` is a constant 0-dim int64 CPU tensor within ±2**31, and its value."""
    known, t = constant_value(value)
    if not known or not isinstance(t, torch.Tensor) or t.dim() != 0 \
            or t.dtype != torch.int64 or t.device.type != "cpu" or t.layout != torch.strided:
        return False, None
    v = int(t.item())
    return (abs(v) <= _LIMIT), v


def _increment(node: Node, of: Value) -> int | None:
    """``c`` if ``node`` is ``of + c`` (``of`` first) with a constant int ``c``, else None."""
    if node.schema == _ADD:
        known, alpha = constant_value(node.inputs[2])
        if not known or type(alpha) is not int or alpha != 1:
            return None
    elif node.schema != _ADD_NO_ALPHA:
        return None
    if node.inputs[0] is not of or node.inputs[1] is of:
        return None
    known, c = constant_value(node.inputs[1])
    return c if known and type(c) is int and abs(c) <= _LIMIT else None


def _is_int(value: Value) -> bool:
    known, v = constant_value(value)
    return (known and type(v) is int) or (not known and value.type is T.Int)


def _compare_ok(node: Node, of: Value) -> bool:
    """``of <op> n`` with an int ``n``, used only through ``aten::Bool``."""
    return (node.schema in _COMPARE and node.inputs[0] is of and node.inputs[1] is not of
            and _is_int(node.inputs[1]) and bool(node.output.uses)
            and all(u.user.schema == _BOOL for u in node.output.uses))


def _scalarize(graph: Graph, loop: Node, j: int) -> bool:
    body: Block = loop.blocks[0]
    init, param = loop.inputs[2 + j], body.inputs[1 + j]
    nxt, final = body.outputs[1 + j], loop.outputs[j]
    known, v0 = _small_int_tensor(init)
    if not known or final.uses or nxt.node.owning_block is not body \
            or _increment(nxt.node, param) is None:
        return False
    increments = [u.user for u in param.uses
                  if u.user.owning_block is body and _increment(u.user, param) is not None]
    if not _writes_nothing(body):
        return False
    loop.replace_input(2 + j, graph.constant(v0, T.Int, before=loop))
    param.type = T.Int
    final.type = T.Int
    first = body.nodes[0]
    _retype_uses(graph, param, first, body, None, increments)
    for inc in increments:
        inc.output.type = T.Int
        new = graph.replace_node(inc, "aten::add", inc.inputs[:2], schema=_ADD_INT)
        index = body.nodes.index(new)
        after = body.nodes[index + 1] if index + 1 < len(body.nodes) else None
        _retype_uses(graph, new.output, after, body, 1 + j, ())
    return True


#: Nodes without a schema that write no tensor.
_PURE_PRIMS = {
    "prim::Constant", "prim::ListConstruct", "prim::TupleConstruct", "prim::ListUnpack",
    "prim::TupleUnpack", "prim::TupleIndex", "prim::If", "prim::Loop", "prim::unchecked_cast",
    "prim::dtype", "prim::device", "prim::Uninitialized", "prim::RaiseException",
}


def _writes_nothing(block: Block) -> bool:
    """No node of ``block`` (nested blocks included) writes any of its arguments (no ``!``
    in its schema; no unknown node). Then no tensor the counter's uses see — the counter's,
    a view of it, or the rebuilt one — is ever written, so reading the int instead of the
    tensor and giving the other uses an equal fresh tensor changes nothing."""
    for node in block.walk():
        if node.schema is None:
            if node.kind not in _PURE_PRIMS:
                return False
        elif "!" in node.schema:
            return False
    return True


def _retype_uses(graph: Graph, value: Value, before: Node | None, block: Block,
                 slot: int | None, increments) -> None:
    """``value`` is now an int: its comparisons become int comparisons; the ``increments``
    (rewritten by the caller) and the body's return ``slot`` (the counter's own) keep the
    int; every other use gets the 0-dim int64 tensor back, made just before ``before`` (or at
    the end of ``block``)."""
    materialized: Value | None = None
    for use in list(value.uses):
        user = use.user
        if user.kind == RETURN and user.owning_block is block and use.index == slot:
            continue
        if user in increments:
            continue
        if _compare_ok(user, value) and _int_compare(graph, user, value):
            continue
        if materialized is None:
            materialized = _tensor_of(graph, value, before, block)
        user.replace_input(use.index, materialized)


def _tensor_of(graph: Graph, value: Value, before: Node | None, block: Block) -> Value:
    consts = [graph.constant(torch.int64, T.Int), graph.constant(None, T.NoneT),
              graph.constant(None, T.NoneT), graph.constant(None, T.NoneT)]
    node = graph.create("aten::scalar_tensor", [value, *consts], output_types=[T.Tensor])
    node.schema = _SCALAR_TENSOR
    if before is not None:
        node.insert_before(before)
    else:
        block.append(node)
    return node.output


def _int_compare(graph: Graph, compare: Node, value: Value | None) -> bool:
    """Rewrite ``Bool(compare(x, n))`` into the int comparison. ``value``: the int standing
    for ``x`` (None: ``x`` is a constant 0-dim int64 tensor, replaced by its value)."""
    if value is None:
        known, v = _small_int_tensor(compare.inputs[0])
        if not known or not _compare_ok(compare, compare.inputs[0]):
            return False
        value = graph.constant(v, T.Int, before=compare)
    kind, schema = _COMPARE[compare.schema]
    new = graph.create(kind, [value, compare.inputs[1]], output_types=[T.Bool])
    new.schema = schema
    new.source = compare.source
    new.insert_before(compare)
    for use in list(compare.output.uses):
        to_bool = use.user
        name = to_bool.output.name
        to_bool.output.replace_all_uses_with(new.output)
        to_bool.destroy()
        new.output.set_name(name)
    compare.destroy()
    return True
