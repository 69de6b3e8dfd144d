"""Which out-variant outputs the runtime may keep between runs and write into again.

A value is *reusable* (the seed's "managed") when overwriting it on the next run cannot be
seen by anyone: it is produced by an out-variant node in the top-level block, it is a
tensor, and it may alias neither a graph output (the caller holds those) nor a graph input
or constant (never written), nor object state. Alias facts come from
``static_runtime.passes.alias.AliasDb``, which reads them from schemas.

Values produced inside ``prim::If``/``prim::Loop`` blocks are not reused: a loop body may
run many times per call with different shapes, and its carried values may feed the next
iteration's inputs.
"""

from __future__ import annotations

from collections.abc import Callable

from static_runtime.ir import types as T
from static_runtime.ir.graph import Graph, Node, Value
from static_runtime.passes.alias import AliasDb


def reusable_values(graph: Graph, has_out_variant: Callable[[Node], bool],
                    alias_db: AliasDb | None = None) -> set[Value]:
    """The outputs the runtime may keep and pass back to their node's out variant."""
    db = alias_db if alias_db is not None else AliasDb(graph)
    result: set[Value] = set()
    for node in graph.nodes:
        if len(node.outputs) != 1 or not has_out_variant(node):
            continue
        v = node.output
        if not isinstance(v.type, T.TensorType):
            continue
        if db.may_alias_graph_output(v) or db.may_alias_graph_input(v):
            continue
        result.add(v)
    return result
