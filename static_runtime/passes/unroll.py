"""``unroll_loops``: a loop of a few trips, fixed by a constant, becomes code without a loop.

TorchScript keeps a ``for k in range(n)`` over a constant ``n`` as a ``prim::Loop`` where the
body breaks early or indexes stacked parameters by the counter (``self.stage_weight[k]``: a
``ModuleList`` cannot be indexed by a variable in TorchScript, so models stack their
weights). The counter then reaches the body as a variable: ``select(W, 0, k)`` of a constant
``W`` runs on every trip (~0.6 µs), and the product it feeds never sees a constant weight, so
it gets no prepacked or measured kernel; every trip also pays the loop's bookkeeping. In the
unrolled code each trip's copy of the body sees its ``k`` as a constant.

A ``prim::Loop`` is unrolled when its trip count is a constant int from 1 to ``MAX_TRIPS`` and
the copies add at most ``MAX_NODES`` nodes (a body counted with its nested blocks), and
``MAX_GRAPH_NODES`` over all the graph's loops. Trip
``k``'s copy runs in the loop's place where the condition before it is the constant ``True``
(a ``for`` without a ``break``), else inside ``prim::If(condition)`` whose other branch hands
the carried values on unchanged: trip by trip what the loop did, in the same order, side
effects included. Loops inside are unrolled first (inner loops are copied as unrolled code).

Then selections from constants fold: ``aten::select(C, dim, index)`` of a constant tensor
``C`` with a constant ``dim`` and ``index`` becomes a constant *view* of ``C`` (its storage
shared: nothing is copied, whatever its size — ``constant_propagation`` bakes in only small
tensors, as it would copy them) when neither ``C`` nor the view is written and the view does
not reach the caller; and a copy's condition ``True and c`` becomes ``c``. Constant
propagation then runs again on what the copies made constant.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from static_runtime.ir import types as T
from static_runtime.ir.graph import Graph, Node, Value
from static_runtime.passes.alias import AliasDb
from static_runtime.passes.constant_propagation import (
    NodeEvaluator,
    constant_propagation,
    constant_value,
)
from static_runtime.passes.inline import clone_node

#: Most trips a loop may have to be unrolled.
MAX_TRIPS = 16
#: Most nodes the copies of one loop's body may add, and of all loops of a graph.
MAX_NODES = 2000
MAX_GRAPH_NODES = 20000

_SELECT = str(torch.ops.aten.select.int._schema)


class _Outer(dict):
    """A clone's value map: a value defined outside the copied body stands for itself."""

    def __missing__(self, value: Value) -> Value:
        return value


def unroll_loops(graph: Graph, evaluate: NodeEvaluator) -> bool:
    changed = False
    budget = MAX_GRAPH_NODES
    # innermost first: walk() gives a loop before the loops in its body
    for node in reversed(list(graph.walk())):
        if node.kind != "prim::Loop" or node.owning_block is None:
            continue
        trips = _trips(node)
        added = trips * sum(1 for _ in node.blocks[0].walk())
        if trips and added <= budget:
            _unroll(graph, node, trips)
            budget -= added
            changed = True
    if changed:
        # (the copies' counters fold first: trip k's is trip k - 1's plus the step)
        constant_propagation(graph, evaluate)
        if _fold_constant_selects(graph) | _fold_constant_conjunctions(graph):
            constant_propagation(graph, evaluate)
    return changed


def _trips(loop: Node) -> int:
    """The most trips the loop makes, if it is unrolled, else 0."""
    known, trips = constant_value(loop.inputs[0])
    if not known or type(trips) is not int:
        return 0
    trips = min(trips, _counted_trips(loop))
    if not 1 <= trips <= MAX_TRIPS:
        return 0
    body_nodes = sum(1 for _ in loop.blocks[0].walk())
    return trips if body_nodes * trips <= MAX_NODES else 0


_COUNTER_TESTS = {str(torch.ops.aten.lt.int._schema): lambda a, b: a < b,
                  str(torch.ops.aten.le.int._schema): lambda a, b: a <= b}
_ADD_INT = str(torch.ops.aten.add.int._schema)
_AND = str(torch.ops.aten.__and__.bool._schema)


def _counted_trips(loop: Node) -> int:
    """A bound on the trips from the body's condition: TorchScript turns ``for k in
    range(n)`` with a ``break`` into a loop of unbounded trips whose condition is
    ``k + 1 < n and not broke``, ``k`` carried from a constant. With ``k`` carried from a
    constant int ``k0``, its next value ``k + s`` for a constant ``s > 0``, and the condition a
    conjunction holding ``k + s < n`` (or ``<=``) for a constant ``n``: the trips while that
    holds, plus the first. Otherwise no bound (``MAX_TRIPS + 1``)."""
    body = loop.blocks[0]
    unbounded = MAX_TRIPS + 1
    conjuncts, pending = [], [body.outputs[0]]
    while pending:
        v = pending.pop()
        if v.node.schema == _AND:
            pending.extend(v.node.inputs)
        else:
            conjuncts.append(v)
    for test in conjuncts:
        holds = _COUNTER_TESTS.get(test.node.schema)
        known_n, n = constant_value(test.node.inputs[1]) if holds else (False, None)
        if not known_n or type(n) is not int:
            continue
        step_node = test.node.inputs[0].node
        if step_node.schema != _ADD_INT:
            continue
        param, (known_s, step) = step_node.inputs[0], constant_value(step_node.inputs[1])
        if not known_s or type(step) is not int or step <= 0 or param not in body.inputs[1:]:
            continue
        j = body.inputs.index(param)  # carried value j - 1: its next value must be k + s
        known_0, k = constant_value(loop.inputs[1 + j])
        if body.outputs[j] is not test.node.inputs[0] or not known_0 or type(k) is not int:
            continue
        trips = 1
        while trips <= MAX_TRIPS and holds(k + step, n):
            k += step
            trips += 1
        return trips
    return unbounded


def _unroll(graph: Graph, loop: Node, trips: int) -> None:
    body = loop.blocks[0]
    types = [out.type for out in loop.outputs]

    def trip(k: int, carried: list[Value], place: Callable[[Node], object]) -> list[Value]:
        env = _Outer()
        env[body.inputs[0]] = graph.constant(k, T.Int)  # (first in the graph: before any use)
        for param, value in zip(body.inputs[1:], carried, strict=True):
            env[param] = value
        for inner in body.nodes:
            place(clone_node(inner, graph, env))
        return after(k + 1, env[body.outputs[0]], [env[v] for v in body.outputs[1:]], place)

    def after(k: int, condition: Value, carried: list[Value],
              place: Callable[[Node], object]) -> list[Value]:
        """The carried values once trips ``k``.. have run (or stopped) after ``carried``."""
        known, go = constant_value(condition)
        known = known and type(go) in (bool, int)  # (IR text writes a bool constant as 0/1)
        if k == trips or (known and not go):
            return carried
        if known:
            return trip(k, carried, place)
        branch = graph.create("prim::If", [condition], output_types=types)
        branch.source = loop.source
        place(branch)
        taken, stopped = branch.add_block(), branch.add_block()
        for value in trip(k, carried, taken.append):
            taken.add_output(value)
        for value in carried:
            stopped.add_output(value)
        return list(branch.outputs)

    finals = after(0, loop.inputs[1], list(loop.inputs[2:]), lambda n: n.insert_before(loop))
    for out, value in zip(loop.outputs, finals, strict=True):
        out.replace_all_uses_with(value)
    loop.destroy()


def _fold_constant_conjunctions(graph: Graph) -> bool:
    """``True and c`` → ``c``, ``False and c`` → ``False``: a copy's condition, where the
    counter's test folded to a constant."""
    changed = False
    for node in list(graph.walk()):
        if node.owning_block is None or node.schema != _AND:
            continue
        for side in (0, 1):
            known, value = constant_value(node.inputs[side])
            if known and type(value) is bool:
                node.output.replace_all_uses_with(node.inputs[1 - side] if value
                                                  else node.inputs[side])
                node.destroy()
                changed = True
                break
    return changed


def _fold_constant_selects(graph: Graph) -> bool:
    changed = False
    db = AliasDb(graph)
    for node in list(graph.walk()):
        if node.owning_block is None or node.schema != _SELECT:
            continue
        known = [constant_value(v) for v in node.inputs]
        if not all(k for k, _ in known):
            continue
        source, dim, index = (value for _, value in known)
        if not isinstance(source, torch.Tensor) or source.layout != torch.strided \
                or type(dim) is not int or type(index) is not int:
            continue
        out = node.output
        if db.has_writers(node.inputs[0]) or db.has_writers(out) \
                or db.may_alias_graph_output(out):
            continue
        try:
            view = torch.select(source.detach(), dim, index)
        except (IndexError, RuntimeError):  # out of range: the run raises, as it would have
            continue
        name = out.name
        const = graph.constant(view, out.type, before=node)
        const.node.source = node.source
        out.replace_all_uses_with(const)
        node.destroy()
        const.set_name(name)
        changed = True
    return changed
