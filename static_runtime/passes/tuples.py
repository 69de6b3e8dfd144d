"""``merge_tuple_unpacks``: fewer tuple and list round trips.

* ``prim::TupleUnpack`` of a ``prim::TupleConstruct`` in the graph → the constructed values
  (tuples are immutable, so this is always exact); likewise ``prim::TupleIndex`` with a
  constant index.
* ``prim::ListUnpack`` of a ``prim::ListConstruct`` → the constructed values, only when the
  list is never changed as a list (``AliasDb.has_writers(..., same_object=True)``) and the
  lengths agree (otherwise the unpack must raise at run time).
* Consecutive ``prim::TupleUnpack`` nodes in a block → one ``prim::VarTupleUnpack(%t1, %t2,
  ...)`` whose outputs are all the unpacked values in order (the seed's
  ``UseVariadicTupleUnpack``): one node dispatch instead of many. An unpack that reads an
  output of an earlier one in the run starts a new run.

Constructions left without uses are removed.
"""

from __future__ import annotations

from static_runtime.ir.graph import Block, Graph, Node, Value
from static_runtime.passes.alias import AliasDb
from static_runtime.passes.constant_propagation import constant_value


def merge_tuple_unpacks(graph: Graph) -> bool:
    """Apply the rewrites above; return whether anything changed."""
    changed = _forward_constructs(graph)
    changed |= _merge_block(graph.block)
    return changed


def _forward_constructs(graph: Graph) -> bool:
    db = AliasDb(graph)
    changed = False
    for node in list(graph.walk()):
        if node.owning_block is None or not node.inputs:
            continue
        source = node.inputs[0]
        producer = source.node
        values: list[Value] | None = None
        if node.kind == "prim::TupleUnpack" and producer.kind == "prim::TupleConstruct":
            if len(producer.inputs) == len(node.outputs):
                values = list(producer.inputs)
        elif node.kind == "prim::TupleIndex" and producer.kind == "prim::TupleConstruct":
            values = _indexed(node, producer)
        elif (node.kind == "prim::ListUnpack" and producer.kind == "prim::ListConstruct"
              and len(producer.inputs) == len(node.outputs)
              and not db.has_writers(source, same_object=True)):
            values = list(producer.inputs)
        if values is None:
            continue
        for out, v in zip(node.outputs, values, strict=True):
            out.replace_all_uses_with(v)
        node.destroy()
        if not source.uses:
            producer.destroy()
        changed = True
    return changed


def _indexed(node: Node, construct: Node) -> list[Value] | None:
    if len(node.inputs) != 2 or len(node.outputs) != 1:
        return None
    known, index = constant_value(node.inputs[1])
    n = len(construct.inputs)
    if not known or not isinstance(index, int) or isinstance(index, bool):
        return None
    if not -n <= index < n:
        return None
    return [construct.inputs[index]]


def _merge_block(block: Block) -> bool:
    changed = False
    run: list[Node] = []
    produced: set[Value] = set()
    for node in list(block.nodes):
        for b in node.blocks:
            changed |= _merge_block(b)
        if node.kind == "prim::TupleUnpack" and not any(v in produced for v in node.inputs):
            run.append(node)
            produced.update(node.outputs)
            continue
        changed |= _merge_run(run)
        run, produced = [], set()
        if node.kind == "prim::TupleUnpack":
            run, produced = [node], set(node.outputs)
    changed |= _merge_run(run)
    return changed


def _merge_run(run: list[Node]) -> bool:
    if len(run) < 2:
        return False
    graph = run[0].graph
    olds = [o for n in run for o in n.outputs]
    merged = graph.create("prim::VarTupleUnpack", [n.inputs[0] for n in run],
                          output_types=[o.type for o in olds])
    merged.source = run[0].source
    merged.insert_before(run[0])
    for old, new in zip(olds, merged.outputs, strict=True):
        old.replace_all_uses_with(new)
    names = [o.name for o in olds]
    for n in run:
        n.destroy()
    for new, name in zip(merged.outputs, names, strict=True):
        new.set_name(name)
    return True
