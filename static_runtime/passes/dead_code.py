"""``eliminate_dead_code``: remove nodes, ``prim::If`` outputs and ``prim::Loop`` carried values
that cannot affect the graph's outputs or the world.

Liveness is computed to a fixed point, alias-aware (as TorchScript's own pass):

* the graph's outputs are *needed*; a node is *live* when it has side effects
  (``effects.has_side_effects``: raising, printing, calls, random draws...), when one of its
  outputs is needed, when a node inside one of its blocks is live, or when it writes a value
  that may alias a needed value or something a needed value holds, or something external
  (``AliasDb.escapes``: a graph input, constant, object state or output);
* a live node needs all its inputs, except control flow: a live ``prim::If`` needs its
  condition and, per needed output, that output of both branches; a live ``prim::Loop``
  needs its trip count and conditions, and a carried value only when the loop output is
  needed or the body reads the carried value (other than to pass it on unchanged).

Everything not live goes; a live ``prim::If`` loses the outputs nobody needs, a live
``prim::Loop`` loses the carried values nobody needs (initial value, body input, body output
and loop output together).
"""

from __future__ import annotations

from static_runtime.ir.graph import Block, Graph, Node, Value
from static_runtime.passes.alias import AliasDb
from static_runtime.passes.effects import has_side_effects


def eliminate_dead_code(graph: Graph) -> bool:
    """Remove dead nodes and dead control-flow outputs; return whether anything went."""
    liveness = _Liveness(graph)
    liveness.run()
    return _sweep_block(graph.block, liveness)


class _Liveness:
    def __init__(self, graph: Graph):
        self.graph = graph
        self.db = AliasDb(graph)
        self.nodes = list(graph.walk())
        self.live: set[Node] = set()
        self.needed: set[Value] = set()
        self.needed_classes: set[object] = set()
        self.changed = False

    def need(self, v: Value) -> None:
        if v in self.needed:
            return
        self.needed.add(v)
        # Reading a container reads what it holds: those classes are needed too.
        self.needed_classes |= self.db.reachable_class_ids(v)
        self.changed = True

    def run(self) -> None:
        for v in self.graph.outputs:
            self.need(v)
        self.changed = True
        while self.changed:
            self.changed = False
            for node in reversed(self.nodes):
                if node not in self.live and self._is_live(node):
                    self.live.add(node)
                    self.changed = True
                    if not node.blocks:
                        for v in node.inputs:
                            self.need(v)
                if node in self.live and node.blocks:
                    self._propagate_control(node)

    def _is_live(self, node: Node) -> bool:
        if has_side_effects(node):
            return True
        if any(o in self.needed for o in node.outputs):
            return True
        if any(inner in self.live for b in node.blocks for inner in b.nodes):
            return True
        for w in self.db.writes(node):
            if self.db.escapes(w) or self.db.class_id(w) in self.needed_classes:
                return True
        return False

    def _propagate_control(self, node: Node) -> None:
        if node.kind == "prim::Loop":
            body = node.blocks[0]
            self.need(node.inputs[0])
            self.need(node.inputs[1])
            self.need(body.outputs[0])
            for i, out in enumerate(node.outputs):
                if out in self.needed or body.inputs[1 + i] in self.needed:
                    self.need(node.inputs[2 + i])
                    self.need(body.outputs[1 + i])
        elif node.kind == "prim::If":
            self.need(node.inputs[0])
            for i, out in enumerate(node.outputs):
                if out in self.needed:
                    for b in node.blocks:
                        self.need(b.outputs[i])
        else:
            # A node with blocks we do not understand: keep everything it touches.
            for v in node.inputs:
                self.need(v)
            for b in node.blocks:
                for v in b.outputs:
                    self.need(v)


def _sweep_block(block: Block, liveness: _Liveness) -> bool:
    changed = False
    for node in reversed(list(block.nodes)):
        if node not in liveness.live:
            node.destroy()
            changed = True
        elif node.kind == "prim::If":
            changed |= _sweep_if(node, liveness)
        elif node.kind == "prim::Loop":
            changed |= _sweep_loop(node, liveness)
        else:
            for b in node.blocks:
                changed |= _sweep_block(b, liveness)
    return changed


def _sweep_if(node: Node, liveness: _Liveness) -> bool:
    changed = False
    for i in reversed(range(len(node.outputs))):
        if node.outputs[i] not in liveness.needed and not node.outputs[i].uses:
            for b in node.blocks:
                b.remove_output(i)
            node.remove_output(i)
            changed = True
    for b in node.blocks:
        changed |= _sweep_block(b, liveness)
    return changed


def _sweep_loop(node: Node, liveness: _Liveness) -> bool:
    body = node.blocks[0]
    dead = [i for i, out in enumerate(node.outputs)
            if body.outputs[1 + i] not in liveness.needed and not out.uses]
    for i in reversed(dead):
        body.remove_output(1 + i)
    changed = _sweep_block(body, liveness)
    for i in reversed(dead):
        if body.inputs[1 + i].uses:
            # Only reachable if liveness was wrong; keep the graph well-formed regardless.
            raise AssertionError(f"carried value {body.inputs[1 + i]} is dead but still used")
        body.remove_input(1 + i)
        node.remove_input(2 + i)
        node.remove_output(i)
        changed = True
    return changed or bool(dead)
