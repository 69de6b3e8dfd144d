"""Emission of control flow and forks: ``prim::If`` as ``if``/``else`` (or only the branch
the signature decides), ``prim::Loop`` as ``for`` or a counting ``while``, and a forked
block as a nested function started by ``runtime.futures.fork``."""

from __future__ import annotations

from static_runtime.runtime.futures import fork
from static_runtime.runtime.plan import ProcessedBlock, ProcessedNode


class ControlFlowEmission:
    """Emission of the nodes that hold blocks. Mixed into ``function.Emitter``, whose state
    and straight-line emission (``nodes.NodeEmission``) it uses."""

    def if_node(self, pn: ProcessedNode, indent: int) -> None:
        taken = self.spec.taken.get(pn.node) if self.spec is not None else None
        if taken is not None:
            return self.taken_branch(pn, pn.blocks[taken], indent)
        targets = [self.local(s) for s in pn.outputs]
        cond = self.expr[pn.inputs[0]]
        self.emit(indent, f"if {cond}:", pn)
        self.stack.append(pn)
        for k, blk in enumerate(pn.blocks):
            if k == 1:
                self.emit(indent, "else:")
            start = len(self.lines)
            self.block(blk, indent + 1)
            if targets:
                values = ", ".join(self.expr[s] for s in blk.outputs)
                self.emit(indent + 1, f"{', '.join(targets)}, = {values},")
            elif len(self.lines) == start:  # no nodes, or all left out by specialisation
                self.emit(indent + 1, "pass")
        self.stack.pop()

    def taken_branch(self, pn: ProcessedNode, blk: ProcessedBlock, indent: int) -> None:
        """An ``if`` whose condition the signature decides: only the taken branch, inline;
        the outputs not folded to constants bound to its values."""
        self.stack.append(pn)
        self.block(blk, indent)
        pairs = [(out, inner) for out, inner in zip(pn.outputs, blk.outputs)
                 if out not in self.spec.known]
        if pairs:
            values = ", ".join(self.expr[inner] for _, inner in pairs)
            targets = ", ".join(self.local(out) for out, _ in pairs)
            self.emit(indent, f"{targets} = {values}")
        self.stack.pop()

    def loop_node(self, pn: ProcessedNode, indent: int) -> None:
        body = pn.blocks[0]
        trip, cond0, *init = [self.expr[s] for s in pn.inputs]
        it = self.names.fresh("_it")
        cond = self.names.fresh("_cond")
        params = [self.local(s) for s in body.inputs[1:]]
        self.expr[body.inputs[0]] = it
        if params:
            self.emit(indent, f"{', '.join(params)}, = {', '.join(init)},", pn)
        # A for loop (condition constantly true) becomes a Python ``for``; anything else a
        # ``while`` that also counts its trips, as prim::Loop's semantics say.
        counted = cond0 == "True" and self._constant_true(body.outputs[0])
        if counted:
            self.emit(indent, f"for {it} in range({trip}):", pn)
        else:
            self.emit(indent, f"{it} = 0", pn)
            self.emit(indent, f"{cond} = {cond0}")
            self.emit(indent, f"while {cond} and {it} < {trip}:", pn)
        self.stack.append(pn)
        start = len(self.lines)
        self.block(body, indent + 1)
        self.stack.pop()
        if not counted:
            self.emit(indent + 1, f"{cond} = {self.expr[body.outputs[0]]}")
        if params:
            outs = ", ".join(self.expr[s] for s in body.outputs[1:])
            self.emit(indent + 1, f"{', '.join(params)}, = {outs},")
        if not counted:
            self.emit(indent + 1, f"{it} += 1")
        elif len(self.lines) == start and not params:
            self.emit(indent + 1, "pass")
        if pn.outputs:
            targets = [self.local(s) for s in pn.outputs]
            self.emit(indent, f"{', '.join(targets)}, = {', '.join(params)},")

    def fork_node(self, pn: ProcessedNode, indent: int) -> None:
        """The forked block as a nested function (its own locals: concurrent forks of it do
        not share values; it reads nothing of ``run`` but constants), started by ``fork``."""
        body = pn.blocks[0]
        name = self.names.fresh("_forked")
        params = [self.local(s) for s in body.inputs]
        self.emit(indent, f"def {name}({', '.join(params)}):", pn)
        self.stack.append(pn)
        self.block(body, indent + 1)
        self.emit(indent + 1, f"return {self.expr[body.outputs[0]]}")
        self.stack.pop()
        start = self.bind(fork, "fork")
        args = ", ".join([name, *(self.expr[s] for s in pn.inputs)])
        self.emit(indent, f"{self.local(pn.outputs[0])} = {start}({args})", pn)

    def _constant_true(self, slot: int) -> bool:
        return self.expr.get(slot) == "True"

