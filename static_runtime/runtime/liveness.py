"""Liveness of signature specialisation: the backward pass that leaves out the nodes whose
results nobody needs once the values the signature decides are literals."""

from __future__ import annotations

from typing import TYPE_CHECKING

from static_runtime.ir.graph import Node
from static_runtime.passes.effects import has_side_effects
from static_runtime.runtime.facts import Specialization
from static_runtime.runtime.plan import Control, ProcessedBlock, ProcessedNode

if TYPE_CHECKING:  # (the specialiser drives this pass; only its alias facts are read)
    from static_runtime.runtime.specialize import Specializer


class Liveness:
    """Backward pass: which nodes still have to run once the known values are literals."""

    def __init__(self, owner: Specializer, spec: Specialization, computed: set[Node]):
        self.owner = owner
        self.spec = spec
        self.computed = computed
        self.needed: set[int] = set()

    def need(self, slots) -> None:
        known = self.spec.known
        self.needed.update(s for s in slots if s not in known)

    def top(self, block: ProcessedBlock) -> None:
        self.need(block.outputs)
        self.block(block)

    def block(self, block: ProcessedBlock) -> None:
        for pn in reversed(block.nodes):
            if not self.node(pn):
                self.spec.dropped.add(pn.node)

    def must_run(self, pn: ProcessedNode) -> bool:
        """Whether ``pn`` (or a node in the blocks that would run) acts on the world."""
        if pn.control in (Control.FORK, Control.LOOP):
            return True
        if pn.control is Control.IF:
            k = self.spec.taken.get(pn.node)
            blocks = pn.blocks if k is None else (pn.blocks[k],)
            return any(self.must_run(inner) for b in blocks for inner in b.nodes)
        if pn.node in self.spec.proven:
            return False
        return (pn.node in self.computed or has_side_effects(pn.node)
                or bool(self.owner.db.writes(pn.node)))

    def node(self, pn: ProcessedNode) -> bool:
        known = self.spec.known
        wanted = any(s in self.needed for s in pn.outputs if s not in known)
        if not wanted and not self.must_run(pn):
            return False
        if pn.control is Control.FORK:
            self.need(pn.inputs)
            return True
        if pn.control is Control.LOOP:
            # Every carried value and the body's condition: the loop runs as it is, only
            # folded nodes inside it go.
            body = pn.blocks[0]
            self.need(pn.inputs)
            self.need(body.outputs)
            self.block(body)
            return True
        if pn.control is Control.IF:
            k = self.spec.taken.get(pn.node)
            if k is None:
                self.need(pn.inputs)
                for b in pn.blocks:
                    self.need(b.outputs)
                    self.block(b)
            else:
                taken = pn.blocks[k]
                self.need(inner for out, inner in zip(pn.outputs, taken.outputs)
                          if out not in known)
                self.block(taken)
            return True
        self.need(pn.inputs)
        return True
