"""Emission of straight-line nodes: each node one line of Python (a pre-bound call, an out
variant writing its arena tensor, an inline expression or unpacking), blocks of them with
values released after their last use, and the lists no call needs built."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any

from static_runtime.ir import schema as S
from static_runtime.ops.registry import Const as InlineConst
from static_runtime.ops.registry import Tier, inline_call, may_hand_back
from static_runtime.runtime.codegen.names import literal
from static_runtime.runtime.hot import yield_to_requests
from static_runtime.runtime.plan import Control, ExecutionPlan, ProcessedBlock, ProcessedNode
from static_runtime.runtime.specialize import Specialization

#: Natives whose work is a Python expression: emitted inline instead of called.
_INLINE = {
    "prim::ListConstruct", "prim::TupleConstruct", "prim::TupleUnpack", "prim::ListUnpack",
    "prim::unchecked_cast", "aten::__is__", "aten::__isnot__", "aten::__not__",
    "prim::DictConstruct",
}


def _wrapped(op: str) -> str:
    """``a <op> b`` on int64s: Python's result when in range, else wrapped around."""
    return ("(_t if -9223372036854775808 <= (_t := {0} " + op + " {1}) <= 9223372036854775807"
            " else _wrap64(_t))")


#: Native operators whose Python meaning is an expression, by exact schema.
_SCHEMA_EXPRESSIONS = {
    "aten::dim(Tensor self) -> int": "{0}.dim()",
    "aten::len.t(t[] a) -> int": "len({0})",
    "aten::size.int(Tensor self, int dim) -> int": "{0}.size({1})",
    "aten::__getitem__.t(t[](a) list, int idx) -> t(*)": "{0}[{1}]",
    # IEEE doubles and bit operations: Python's operators are TorchScript's exactly
    "aten::add.float(float a, float b) -> float": "({0} + {1})",
    "aten::sub.float(float a, float b) -> float": "({0} - {1})",
    "aten::mul.float(float a, float b) -> float": "({0} * {1})",
    "aten::__and__.bool(bool a, bool b) -> bool": "({0} & {1})",
    "aten::__or__.bool(bool a, bool b) -> bool": "({0} | {1})",
    "aten::__xor__.bool(bool a, bool b) -> bool": "({0} ^ {1})",
    "aten::__and__.int(int a, int b) -> int": "({0} & {1})",
    "aten::__or__.int(int a, int b) -> int": "({0} | {1})",
    "aten::__xor__.int(int a, int b) -> int": "({0} ^ {1})",
    # int64 arithmetic: Python's, wrapped around at 64 bits when it leaves the range (as
    # the native does, ``ops/native/scalars.py``), with the range test inline
    "aten::add.int(int a, int b) -> int": _wrapped("+"),
    "aten::sub.int(int a, int b) -> int": _wrapped("-"),
    "aten::mul.int(int a, int b) -> int": _wrapped("*"),
}
_COMPARISONS = {"aten::eq": "==", "aten::ne": "!=", "aten::lt": "<", "aten::le": "<=",
                "aten::gt": ">", "aten::ge": ">="}
_NUMBER_TYPES = {"int", "float", "bool"}


def _scalar_expression(pn: ProcessedNode, ins: list[str]) -> str | None:
    """The node as a Python expression, for natives whose meaning is exactly one:
    tensor metadata, list length and indexing (IndexError as the native raises), and
    comparisons of two Python numbers (which return bool, as TorchScript's do)."""
    if pn.tier is not Tier.NATIVE or pn.node.schema is None or len(pn.outputs) != 1:
        return None
    template = _SCHEMA_EXPRESSIONS.get(pn.node.schema)
    if template is not None:
        return template.format(*ins)
    op = _COMPARISONS.get(pn.kind)
    if op is not None:
        info = S.parse(pn.node.schema)
        if (len(info.arguments) == 2 and all(a.type in _NUMBER_TYPES for a in info.arguments)
                and [r.type for r in info.returns] == ["bool"]):
            return f"{ins[0]} {op} {ins[1]}"
    return None



class NodeEmission:
    """Emission of blocks and of straight-line nodes: calls of pre-bound operators (an out
    variant into its arena tensor), inline expressions, unpacking, the profiler's clock
    readings and ``del`` after a value's last use. Mixed into ``function.Emitter``, whose
    state it reads."""

    # -- blocks
    def block(self, block: ProcessedBlock, indent: int, top: bool = False) -> None:
        last_use = last_uses(block, self.inputs_of) if top else {}
        timed = self.timed if top and self.timed is not None else frozenset()
        pause = yield_to_requests()  # (generated on a builder's thread, for a hot signature)
        for k, pn in enumerate(block.nodes):
            pause()
            if k in timed and k - 1 not in timed:
                self.stamp(indent)
            self.node(pn, indent)
            if self.record:
                kept = [s for s in pn.outputs if s in self.defined]
                if kept:
                    self.emit(indent, "; ".join(f"_rec[{s}] = {self.expr[s]}" for s in kept))
            if top and k < len(block.nodes) - 1:  # after the last node, return releases all
                dead = [s for s, at in last_use.items() if at == k]
                names = [self.expr[s] for s in dead
                         if s not in self.arena and s in self.top_defined and s in self.defined]
                if names:
                    self.emit(indent, f"del {', '.join(names)}")
                    for s in dead:
                        self.top_defined.discard(s)
            if k in timed:
                self.stamp(indent)

    def node(self, pn: ProcessedNode, indent: int) -> None:
        if self.spec is not None and pn.node in self.spec.dropped:
            return
        if pn.node in self.hoisted or pn.node in self.hoisting.literal_lists:
            return
        if pn.control is Control.IF:
            return self.if_node(pn, indent)
        if pn.control is Control.LOOP:
            return self.loop_node(pn, indent)
        if pn.control is Control.FORK:
            return self.fork_node(pn, indent)
        if self.spec is not None and pn.node in self.spec.memo:
            return self.memo_node(pn, indent)
        if pn.node in self.view_memos:
            return self.memo_node(pn, indent, self.view_memos[pn.node])
        self.straight(pn, indent)

    def memo_node(self, pn: ProcessedNode, indent: int, memo: str | None = None) -> None:
        """A value the signature alone decides: made on the first call of this binding of
        the code (one layout: one signature), kept in the factory's scope for the next. A
        managed tensor is made by the allocating form: its arena region is shared. (``memo``:
        the name planned for a kept view of an arena tensor.)"""
        if memo is not None:
            return self.kept_view(pn, indent, memo)
        memo = self.new_memo()
        self.emit(indent, f"if {memo} is None:")
        if pn.managed:
            self.emit(indent + 1, f"{self.local(pn.outputs[0])} = "
                                  f"{self.call(pn, pn.fn, 'f', None)}", pn)
        else:
            self.straight(pn, indent + 1)
        name = self.expr[pn.outputs[0]]
        self.emit(indent + 1, f"{memo} = {name}")
        self.emit(indent, "else:")
        self.emit(indent + 1, f"{name} = {memo}")

    def kept_view(self, pn: ProcessedNode, indent: int, memo: str) -> None:
        """A result that may be a view of an arena tensor (or of a kept one): kept per binding
        if its first call made it one, else (``reshape`` copied, ``to`` converted; memo
        False) made on every call."""
        self.emit(indent, f"if {memo} is None or {memo} is False:")
        self.straight(pn, indent + 1)
        name, src = self.expr[pn.outputs[0]], pn.inputs[0]
        kept = f"_shares({name}, {self.expr[src]})"
        if src in self.kept_view_of:
            kept = f"{self.kept_view_of[src]} is not False and {kept}"
        self.emit(indent + 1, f"if {memo} is None:")
        self.emit(indent + 2, f"{memo} = {name} if {kept} else False")
        self.emit(indent, "else:")
        self.emit(indent + 1, f"{name} = {memo}")

    def straight(self, pn: ProcessedNode, indent: int) -> None:
        """A node that is not control flow: a call, an out variant into its arena tensor, an
        inline expression or unpacking."""
        kind = pn.kind
        spread = pn.impl.spread
        if spread is not None and pn.inputs[spread.index] in self.absorbed:
            # (a spread form is only chosen for unmanaged single-output calls)
            fn = self.bind(spread.fn, f"f_{kind.split('::')[-1]}")
            ins = [self.expr[s] for s in self.inputs_of(pn)][:spread.takes]
            self.emit(indent, f"{self.local(pn.outputs[0])} = {fn}({', '.join(ins)})", pn)
            return
        if kind == "prim::ListConstruct" and pn.outputs[0] in self.absorbed:
            return  # its readers take the elements
        args = self.args(pn)
        if kind in _INLINE:
            return self.inline(pn, indent, args)
        expr = _scalar_expression(pn, [self.expr[s] for s in pn.inputs])
        if expr is not None:
            self.emit(indent, f"{self.local(pn.outputs[0])} = {expr}", pn)
            return
        outs = pn.outputs
        if pn.managed and outs[0] in self.arena:
            fn = self.bind(pn.fn, f"f_{kind.split('::')[-1]}")
            m = self.arena_names[outs[0]]
            target = self.local(outs[0])
            self.emit(indent, "try:")
            if may_hand_back(pn.out_fn):
                # (it writes ``m`` or hands back a result of its own: what it returns is the
                # value; no view of ``m`` is kept for it)
                self.emit(indent + 1, f"{target} = {self.call(pn, pn.out_fn, 'o', m)}", pn)
            else:
                self.emit(indent + 1, self.call(pn, pn.out_fn, "o", m), pn)
                self.emit(indent + 1, f"{target} = {m}")
            self.emit(indent, "except RuntimeError as e:")
            self.emit(indent + 1, f"{target} = _refused(e, {outs[0]}, {fn}, {args})", pn)
            for memo in self.view_resets.get(outs[0], ()):
                # (views kept of the arena tensor: taken of this call's tensor instead)
                self.emit(indent + 1, f"{memo} = None")
            views = [h for h in self.hoisting.nodes if self.hoisting.root[h.node] == outs[0]]
            if views:
                # Views of the value that took the arena tensor's place, for this call; the
                # next call through this code hands back to the general path.
                for h in views:
                    self.hoisted_call(h, indent + 1)
                self.emit(indent + 1, "_dirty = True")
            return
        call = self.call(pn, pn.fn, "f", None)
        if len(outs) == 1:
            self.emit(indent, f"{self.local(outs[0])} = {call}", pn)
        elif not outs:
            self.emit(indent, call, pn)
        else:
            targets = [self.local(s) for s in outs]
            self.emit(indent, f"{', '.join(targets)}, = {call}", pn)

    def inputs_of(self, pn: ProcessedNode) -> list[int]:
        """The slots the code for ``pn`` reads: its inputs, with an absorbed list replaced by
        its elements, and none for the ``ListConstruct`` of an absorbed list."""
        if pn.kind == "prim::ListConstruct" and pn.outputs[0] in self.absorbed:
            return []
        spread = pn.impl.spread
        if spread is None or pn.inputs[spread.index] not in self.absorbed:
            return list(pn.inputs)
        i = spread.index
        return [*pn.inputs[:i], *self.absorbed[pn.inputs[i]], *pn.inputs[i + 1:]]

    def call(self, pn: ProcessedNode, fn: Callable[..., Any], prefix: str, out: str | None
             ) -> str:
        """The call of ``fn`` (``out`` first for an out variant), or of the binding it only
        forwards to (``registry.InlineCall``: one Python frame less per node)."""
        hint = f"{prefix}_{pn.kind.split('::')[-1]}"
        how = inline_call(fn)
        if how is None or (out is None) != (how.out is None):
            name = self.bind(fn, hint)
            args = ", ".join(([out] if out is not None else []) + [self.expr[s] for s in pn.inputs])
            return f"{name}({args})"

        def spell(item: int | InlineConst) -> str:
            if isinstance(item, InlineConst):
                lit = literal(item.value)
                return lit if lit is not None else self.bind(item.value, "c")
            return self.expr[pn.inputs[item]]

        parts = [spell(a) for a in how.args] + [f"{k}={spell(a)}" for k, a in how.kwargs]
        if how.out is not None:
            parts.append(f"{how.out}={out}")
        text = f"{self.bind(how.target, hint)}({', '.join(parts)})"
        return f"list({text})" if how.as_list else text

    def hoisted_call(self, pn: ProcessedNode, indent: int) -> None:
        """``pn``'s call, assigning the names its hoisted results have; a list argument (fixed
        for the layout, or it would not be hoisted) spelled as a literal, valid in the
        factory and in ``run`` alike."""
        with self.spelled({s: self.list_literals[s] for s in pn.inputs
                           if s in self.list_literals}):
            targets = ", ".join(self.expr[s] for s in pn.outputs)
            if pn.kind in ("prim::ListUnpack", "prim::TupleUnpack"):
                self.emit(indent, f"{targets}, = {self.expr[pn.inputs[0]]}", pn)
            else:
                call = self.call(pn, pn.fn, "f", None)
                self.emit(indent, f"{targets}, = {call}" if len(pn.outputs) > 1 else
                          f"{targets} = {call}", pn)

    @contextlib.contextmanager
    def spelled(self, exprs: dict[int, str]):
        """Within the block, the slots in ``exprs`` read as those expressions."""
        saved = {s: self.expr.get(s) for s in exprs}
        self.expr.update(exprs)
        try:
            yield
        finally:
            for s, e in saved.items():
                if e is None:
                    self.expr.pop(s, None)
                else:
                    self.expr[s] = e

    def inline(self, pn: ProcessedNode, indent: int, args: str) -> None:
        kind, outs = pn.kind, pn.outputs
        ins = [self.expr[s] for s in pn.inputs]
        if kind == "prim::ListConstruct":
            expr = f"[{args}]"
        elif kind == "prim::TupleConstruct":
            expr = f"({args},)" if args else "()"
        elif kind == "prim::DictConstruct":
            expr = "{" + ", ".join(f"{k}: {v}" for k, v in zip(ins[0::2], ins[1::2])) + "}"
        elif kind == "prim::unchecked_cast":
            expr = ins[0]
        elif kind == "aten::__is__":
            expr = f"{ins[0]} is {ins[1]}"
        elif kind == "aten::__isnot__":
            expr = f"{ins[0]} is not {ins[1]}"
        elif kind == "aten::__not__":
            expr = f"not {ins[0]}"
        else:  # TupleUnpack / ListUnpack: Python's unpacking checks the length
            targets = [self.local(s) for s in outs]
            self.emit(indent, f"{', '.join(targets)}, = {ins[0]}" if targets else
                      f"() = {ins[0]}", pn)
            return
        self.emit(indent, f"{self.local(outs[0])} = {expr}", pn)

    def stamp(self, indent: int) -> None:
        name = self.names.fresh(f"_t{len(self.stamps)}")
        self.stamps.append(name)
        self.emit(indent, f"{name} = _clock()")


def last_uses(block: ProcessedBlock,
               inputs_of: Callable[[ProcessedNode], list[int]]) -> dict[int, int]:
    """For each slot read in ``block`` (or in blocks nested in it), the index of the last
    top-level node that reads it (``inputs_of``: what a node's code reads); graph outputs are
    never released."""
    last: dict[int, int] = {}

    def reads(pn: ProcessedNode) -> set[int]:
        out = set(inputs_of(pn))
        for b in pn.blocks:
            for inner in b.nodes:
                out |= reads(inner)
            out |= set(b.outputs)
        return out

    for k, pn in enumerate(block.nodes):
        for s in reads(pn):
            last[s] = k
        for s in pn.outputs:
            last.setdefault(s, k)
    for s in block.outputs:
        last.pop(s, None)
    return last


def absorbed_lists(plan: ExecutionPlan, spec: Specialization | None
                    ) -> dict[int, tuple[int, ...]]:
    """List slot → its elements' slots, for each list a ``prim::ListConstruct`` builds that is
    read only by calls with a spread form for it (``OpImpl.spread``) of its length: nothing
    else sees the list, so it need not exist. A list that is a block's output, or folded by
    the specialisation, is kept."""
    made: dict[int, ProcessedNode] = {}
    readers: dict[int, list[ProcessedNode]] = {}
    escaping: set[int] = set()

    def walk(block: ProcessedBlock) -> None:
        escaping.update(block.outputs)
        for pn in block.nodes:
            if pn.kind == "prim::ListConstruct" and len(pn.outputs) == 1:
                made[pn.outputs[0]] = pn
            for s in pn.inputs:
                readers.setdefault(s, []).append(pn)
            for b in pn.blocks:
                walk(b)

    walk(plan.block)
    known = spec.known if spec is not None else {}
    out: dict[int, tuple[int, ...]] = {}
    for slot, pn in made.items():
        users = readers.get(slot, [])
        if slot in escaping or slot in known or not users or not pn.inputs:
            continue
        if all(u.impl.spread is not None and not u.managed and u.inputs.count(slot) == 1
               and u.inputs[u.impl.spread.index] == slot
               and u.impl.spread.count == len(pn.inputs) and len(u.outputs) == 1
               for u in users):
            out[slot] = pn.inputs
    return out

