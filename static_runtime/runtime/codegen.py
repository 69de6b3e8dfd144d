"""The generated-code executor: a prepared, planned graph as one straight-line Python function.

Per node the reference interpreter pays for a loop iteration, a list of argument slots, a
branch on the node's kind and stores into a value array. Here each node is one line of
Python: locals instead of the value array, every operator a pre-bound callable in the
function's globals, constants inlined (literals) or bound as globals, arena tensors as
closure variables, ``if``/``while`` for control flow, and intermediates released
(``del``) after their last use unless they live in the arena.

Hygiene, as torch.fx's code generation does it: names come from one namespace (legal,
unique, no keywords), captured objects go in an explicit globals dict, a header says what
produced the code, and ``line_to_node`` maps every generated line back to its IR node so an
exception names the node and its source line. The source is registered with ``linecache``
so tracebacks show it.

The code depends on the arena layout (which managed values live in the arena for the
current input signature), so it is generated per layout and cached by the module; each
runtime binds it to its own arena tensors by calling the generated factory.
"""

from __future__ import annotations

import builtins
import contextlib
import itertools
import keyword
import linecache
import math
import re
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from static_runtime.ir import types as T
from static_runtime.ir.graph import Node, Value
from static_runtime.memory.cache import _sig, signature, structure
from static_runtime.ops import schema as S
from static_runtime.ops.native.scalars import _wrap as wrap_int64
from static_runtime.ops.registry import Const as InlineConst
from static_runtime.ops.registry import Tier, inline_call
from static_runtime.runtime.futures import fork
from static_runtime.runtime.hoist import Hoister, Hoisting, HoistRefused, check_hoisted
from static_runtime.runtime.hot import BackgroundBuilder, HotSignatures
from static_runtime.runtime.interpreter import (
    Interpreter,
    MemoryConfig,
    _is_refused_resize,
    annotate,
)
from static_runtime.runtime.plan import Control, ExecutionPlan, ProcessedBlock, ProcessedNode
from static_runtime.runtime.specialize import Specialization, Specializer

_counter = itertools.count()

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


@dataclass
class GeneratedCode:
    """The source of one generated function, its factory and the map back to the IR."""

    source: str
    factory: Callable[..., Callable[..., list[Any]]]
    filename: str
    #: generated line → the node it runs, then the control-flow nodes around it (inner first)
    line_to_node: dict[int, tuple[ProcessedNode, ...]] = field(default_factory=dict)
    #: slots the factory takes as arena tensors, in argument order
    arena_slots: tuple[int, ...] = ()

    def nodes_at(self, lineno: int) -> tuple[ProcessedNode, ...]:
        return self.line_to_node.get(lineno, ())


class _Names:
    """One namespace for every name in the generated code."""

    def __init__(self) -> None:
        self.used: set[str] = set(dir(builtins)) | set(keyword.kwlist)

    def fresh(self, hint: str) -> str:
        base = re.sub(r"\W", "_", hint) or "v"
        if base[0].isdigit():
            base = f"v{base}"
        name = base
        k = 1
        while name in self.used:
            name = f"{base}_{k}"
            k += 1
        self.used.add(name)
        return name


def _literal(value: Any) -> str | None:
    """Python source for a constant that can be inlined, or None."""
    if value is None or isinstance(value, bool):
        return repr(value)
    if isinstance(value, int):
        return repr(value)
    if isinstance(value, float) and math.isfinite(value):
        return repr(value)
    if isinstance(value, str):
        return repr(value)
    return None


class _Emitter:
    def __init__(self, plan: ExecutionPlan, arena: frozenset[int], title: str,
                 guard: tuple[bool | tuple[str, int], ...] | None, timed: frozenset[int] | None = None,
                 spec: Specialization | None = None, hoisting: Hoisting | None = None,
                 record: bool = False):
        self.plan = plan
        #: every value a node defines is also stored into ``_rec`` (the executor's value
        #: array): a recording call that the memory planner observes
        self.record = record
        #: views of arena tensors taken once per layout (``runtime.hoist``)
        self.hoisting = hoisting or Hoisting()
        self.hoisted: set[Node] = {pn.node for pn in self.hoisting.nodes}
        self.hoisted_names: list[str] = []
        #: list slot → a literal building it, for lists fixed for the layout
        self.list_literals: dict[int, str] = {}
        #: what the input signature the guard checks determines (None: nothing assumed)
        self.spec = spec
        #: the profiler's variant: the top-level nodes (by index) with a clock reading before
        #: and after them, returned with the outputs (``benchmark_individual_ops``); None:
        #: no readings
        self.timed = timed
        self.stamps: list[str] = []
        self.arena = arena  # managed slots whose tensors live in the arena for this layout
        self.title = title
        #: per input, whether it is a tensor (None: the code does not check the signature)
        self.guard = guard
        self.names = _Names()
        self.names.used.update({"_refused", "_key", "_rec", "_sig", "SignatureChanged", "_clock",
                                "_hoist", "_dirty", "_at", "_hoisted", "_check_hoisted",
                                "HoistRefused", "_t", "_wrap64"})
        self.globals: dict[str, Any] = {"_wrap64": wrap_int64}
        self.lines: list[str] = []
        self.line_nodes: dict[int, tuple[ProcessedNode, ...]] = {}
        self.stack: list[ProcessedNode] = []  # enclosing control-flow nodes
        self.expr: dict[int, str] = {}  # slot → expression that reads it
        value_of = {slot: value for value, slot in plan.slot_of.items()}
        self.value_of: dict[int, Value] = value_of
        for slot, const in plan.constants.items():
            lit = _literal(const)
            if lit is None:
                lit = self.bind(const, f"c_{value_of[slot].name}")
            self.expr[slot] = lit
        #: slots bound to a local name (what ``del`` may release)
        self.defined: set[int] = set()
        if spec is not None:
            for slot, value in spec.known.items():
                lit = _literal(value)
                self.expr[slot] = lit if lit is not None else self.bind(
                    value, f"k_{value_of[slot].name}")
        self.arena_names = {s: self.names.fresh(f"m_{value_of[s].name}") for s in sorted(arena)}
        #: list slots built by a ``prim::ListConstruct`` that only spreading calls read: the
        #: list is never built, each call takes its elements (``OpImpl.spread``)
        self.absorbed: dict[int, tuple[int, ...]] = _absorbed_lists(plan, spec)

    # -- helpers
    def bind(self, obj: Any, hint: str) -> str:
        name = self.names.fresh(f"_{hint}")
        self.globals[name] = obj
        return name

    def local(self, slot: int) -> str:
        name = self.names.fresh(self.value_of[slot].name)
        self.expr[slot] = name
        self.defined.add(slot)
        return name

    def emit(self, indent: int, text: str, node: ProcessedNode | None = None) -> None:
        self.lines.append("    " * indent + text)
        if node is not None:
            chain = (node, *reversed(self.stack)) if self.stack[-1:] != [node] else \
                tuple(reversed(self.stack))
            self.line_nodes[len(self.lines)] = chain

    def args(self, pn: ProcessedNode) -> str:
        return ", ".join(self.expr[s] for s in pn.inputs)

    # -- blocks
    def block(self, block: ProcessedBlock, indent: int, top: bool = False) -> None:
        last_use = _last_uses(block, self.inputs_of) if top else {}
        timed = self.timed if top and self.timed is not None else frozenset()
        for k, pn in enumerate(block.nodes):
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
            self.emit(indent + 1, self.call(pn, pn.out_fn, "o", m), pn)
            self.emit(indent + 1, f"{target} = {m}")
            self.emit(indent, "except RuntimeError as e:")
            self.emit(indent + 1, f"{target} = _refused(e, {outs[0]}, {fn}, {args})", pn)
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
                lit = _literal(item.value)
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

    def hoist_prologue(self) -> list[str]:
        """The factory's part: names for the hoisted views, ``_hoist()`` taking them of the
        arena tensors (and naming the node whose call raised), the check that each is a
        view of its arena tensor (``runtime.hoist.check_hoisted``)."""
        hoisting = self.hoisting
        fixed = set(self.plan.constants) | (set(self.spec.known) if self.spec else set())
        for pn in self.plan.block.nodes:
            if (pn.kind in ("prim::ListConstruct", "prim::TupleConstruct")
                    and all(s in fixed or s in self.list_literals for s in pn.inputs)):
                items = ", ".join(self.list_literals.get(s) or self.expr[s] for s in pn.inputs)
                self.list_literals[pn.outputs[0]] = (
                    f"[{items}]" if pn.kind == "prim::ListConstruct"
                    else f"({items},)" if items else "()")
        for pn in hoisting.nodes:
            for s in pn.outputs:
                self.expr[s] = self.names.fresh(f"h_{self.value_of[s].name}")
                self.hoisted_names.append(self.expr[s])
        names = ", ".join(self.hoisted_names)
        self.globals["_hoisted"] = tuple(pn.node for pn in hoisting.nodes)
        self.globals["_check_hoisted"] = check_hoisted
        self.globals["HoistRefused"] = HoistRefused
        lines = [f"    {names} = {', '.join(['None'] * len(self.hoisted_names))}",
                 "    _dirty = False",
                 "    def _hoist():",
                 f"        nonlocal {names}",
                 "        _at = 0",
                 "        try:"]
        body_start = len(self.lines)
        with self.spelled(self.arena_names):  # in the factory: the arena tensors themselves
            for k, pn in enumerate(hoisting.nodes):
                self.emit(3, f"_at = {k}")
                self.hoisted_call(pn, 3)
        body = self.lines[body_start:]
        del self.lines[body_start:]
        lines += body
        lines += ["        except Exception as e:",
                  "            raise HoistRefused(_hoisted[_at]) from e",
                  "    _hoist()"]
        pairs = ", ".join(
            f"(({', '.join(self.expr[s] for s in pn.outputs)},), "
            f"{self.arena_names[hoisting.root[pn.node]]})" for pn in hoisting.nodes)
        lines.append(f"    _check_hoisted(_hoisted, ({pairs},))")
        return lines

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

    def stamp(self, indent: int) -> None:
        name = self.names.fresh(f"_t{len(self.stamps)}")
        self.stamps.append(name)
        self.emit(indent, f"{name} = _clock()")

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

    # -- the whole function
    def function(self) -> str:
        plan = self.plan
        # Only values defined in the top-level block are released with ``del``: one defined
        # in a branch may not exist when the branch was not taken.
        self.top_defined: set[int] = set(plan.block.inputs)
        for pn in plan.block.nodes:
            self.top_defined.update(pn.outputs)
        params = [self.local(s) for s in plan.block.inputs]
        spec = self.spec
        on = "its input signature" if self.guard is not None else (
            "its signature's structure (ranks, dtypes) and its shape program's guards")
        specialised = [] if spec is None else [(
            f"# Specialised on {on}: {len(spec.known)} values folded, "
            f"{len(spec.taken)} branches decided, {len(spec.dropped)} nodes left out.")]
        if self.hoisting:
            specialised.append(f"# {len(self.hoisting.nodes)} views of arena tensors taken once "
                               "per layout (_hoist), not per call.")
        factory_extra = ["_refused", "_key", *(["_rec"] if self.record else [])]
        header = [
            f"# Generated by static_runtime for {self.title}.",
            *specialised,
            "# One line per IR node; globals hold the bound operators and constants,",
            "# the factory's parameters the arena tensors of one memory layout and the",
            "# input signature it was planned for.",
            f"def _factory({', '.join([*self.arena_names.values(), *factory_extra])}):",
        ]
        checks = []
        if self.guard is not None:
            # The layout is only valid for its signature: check it as directly as possible
            # (dtype identity and shape equality for tensors) and hand back to the general
            # path, before anything ran, when it differs.
            self.globals["_sig"] = _sig
            self.globals["SignatureChanged"] = SignatureChanged
            on_cpu = self.spec is not None and self.spec.assumes_device
            for i, (param, kind) in enumerate(zip(params, self.guard)):
                if kind is True:
                    header.append(f"    _dtype{i}, _shape{i} = _key[{i}]")
                    checks.append(f"{param}.dtype is not _dtype{i} or {param}.shape != _shape{i}")
                    if on_cpu:
                        checks.append(f"not {param}.is_cpu")
                elif isinstance(kind, tuple):  # ("list", n): a list of n tensors
                    n = kind[1]
                    header.append(f"    _elems{i} = _key[{i}][1]")
                    checks.append(f"type({param}) is not list or len({param}) != {n}")
                    for j in range(n):
                        header.append(f"    _dtype{i}_{j}, _shape{i}_{j} = _elems{i}[{j}]")
                        checks.append(f"{param}[{j}].dtype is not _dtype{i}_{j} or "
                                      f"{param}[{j}].shape != _shape{i}_{j}")
                        if on_cpu:
                            checks.append(f"not {param}[{j}].is_cpu")
                else:
                    header.append(f"    _key{i} = _key[{i}]")
                    checks.append(f"_sig({param}) != _key{i}")
        self.lines = []
        if self.hoisting:
            header += self.hoist_prologue()
            self.line_nodes.clear()  # the factory's lines are not the run's
        header.append(f"    def run({', '.join(params)}):")
        if self.hoisting:
            header.append(f"        nonlocal {', '.join(self.hoisted_names)}, _dirty")
        if checks:
            header.append(f"        if {' or '.join(checks)}:")
            header.append("            raise SignatureChanged")
        if self.hoisting:
            # A refused arena write left views of another tensor (and PyTorch may have
            # changed the arena tensor's sizes before refusing): hand back to the general
            # path, which binds fresh code.
            header.append("        if _dirty:")
            header.append("            raise SignatureChanged")
        self.lines = []
        if self.timed is not None:
            self.globals["_clock"] = time.perf_counter_ns
        self.block(plan.block, 2, top=True)
        outs = ", ".join(self.expr[s] for s in plan.block.outputs)
        if self.timed is not None:
            self.stamp(2)
            self.emit(2, f"return [{outs}], ({', '.join(self.stamps)},)")
        else:
            self.emit(2, f"return [{outs}]")
        self.emit(1, "return run")
        body_offset = len(header)
        self.line_nodes = {line + body_offset: pn for line, pn in self.line_nodes.items()}
        return "\n".join(header + self.lines) + "\n"


def _last_uses(block: ProcessedBlock,
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


def _absorbed_lists(plan: ExecutionPlan, spec: Specialization | None
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


#: Lists of at most this many tensors get their elements checked one by one in a guard.
_GUARD_LIST_MAX = 32


def _guard_kind(k: Any, t: T.Type) -> bool | tuple[str, int]:
    """How generated code checks an input against its signature entry ``k``: True, a
    tensor's dtype and shape directly (for inputs typed ``Tensor``: an ``Optional[Tensor]``
    may be None on the next call); ``("list", n)``, a ``List[Tensor]`` of n CPU tensors
    element by element; False, ``_sig`` (which compares anything)."""
    if isinstance(k, tuple) and len(k) == 2 and isinstance(k[0], torch.dtype):
        return isinstance(t, T.TensorType)
    if (isinstance(t, T.ListType) and isinstance(t.elem, T.TensorType) and isinstance(k, tuple)
            and len(k) == 2 and k[0] is list and len(k[1]) <= _GUARD_LIST_MAX
            and all(isinstance(e, tuple) and len(e) == 2 and isinstance(e[0], torch.dtype)
                    for e in k[1])):
        return ("list", len(k[1]))
    return False


class SignatureChanged(Exception):
    """Raised by generated code, before running anything, when the inputs' signature is not
    the one its memory layout was planned for."""


def generate(plan: ExecutionPlan, arena_slots: frozenset[int], title: str,
             guard: tuple[bool | tuple[str, int], ...] | None = None, timed: frozenset[int] | None = None,
             spec: Specialization | None = None, hoisting: Hoisting | None = None,
             record: bool = False, structural: bool = False) -> GeneratedCode:
    """Generate, compile and return the code for ``plan`` with ``arena_slots`` in the arena;
    with ``guard`` (per input: is it a tensor), the code checks the input signature first.
    ``timed`` (indices of top-level nodes): the function returns ``(outputs, stamps)``,
    ``stamps`` the ``time.perf_counter_ns()`` readings before and after each of those nodes
    in order (one reading between two timed neighbours: after the first is before the
    second), then one before the return (``stamp_layout`` tells which is which).
    ``spec`` (only with ``guard``: the code may assume only the signature it checks): the
    values, branches and dead nodes that signature decides (``runtime.specialize``).
    ``hoisting``: the views of arena tensors the factory takes once (``runtime.hoist``); the
    factory raises ``HoistRefused`` if one is not a view. ``record``: the factory takes a
    third argument, a list every value is stored into as it is defined (the executor's value
    array, for a recording call). ``structural``: ``spec`` holds for every call the code gets
    without a guard (a shape program's: the executor binds the code only for layouts that
    program made)."""
    if guard is None and not structural:
        spec = None
    emitter = _Emitter(plan, arena_slots, title, guard, timed, spec, hoisting, record)
    source = emitter.function()
    filename = f"<static_runtime generated {next(_counter)}>"
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    namespace = dict(emitter.globals)
    exec(compile(source, filename, "exec"), namespace)  # noqa: S102  (our own generated code)
    return GeneratedCode(source, namespace["_factory"], filename, emitter.line_nodes,
                         tuple(emitter.arena_names))


class CodeCache:
    """Generated code per (layout, values kept out of the arena, and, when specialised, input
    signature), shared by a module's runtimes; the least recently used of more than
    ``maxsize`` entries is dropped (runtimes keep the functions they hold).

    With ``specialize_after`` (and specialisation on), code specialised on a signature is
    made only once the signature is hot (``runtime/hot.py``), on a background thread; until
    then the *generic* code serves it — one function per set of arena values, shared by
    every layout and size, folding nothing a size decides (``generic``)."""

    def __init__(self, plan: ExecutionPlan, title: str, *, specialize: bool = False,
                 hoist: bool = False, maxsize: int | None = None, specialize_after: int = 0):
        import threading

        self.plan = plan
        self.title = title
        self.maxsize = maxsize
        #: specialises code on the input signature its guard checks (None: off)
        self.specializer = Specializer(plan) if specialize else None
        #: which signatures are hot enough for code of their own (None: every signature gets
        #: its code on its first call from the arena, as it waits)
        self.hot = HotSignatures(specialize_after) if specialize and specialize_after else None
        self.builder = BackgroundBuilder("static_runtime-specialize")
        self._generic: dict[tuple, GeneratedCode] = {}
        self._programs: dict[int, Any] = {}
        #: how many functions were generated (generic and specialised), for benchmarks
        self.generated = 0
        #: takes views of arena tensors once per layout (None: off)
        self.hoister = Hoister(plan) if hoist else None
        #: nodes a factory found not to give views of their arena tensor (``HoistRefused``)
        self.not_views: frozenset[Node] = frozenset()
        self._items: OrderedDict[tuple, GeneratedCode] = OrderedDict()
        self._specs: OrderedDict[tuple, Specialization] = OrderedDict()
        self._lock = threading.Lock()
        self.latest: GeneratedCode | None = None

    def spec_for(self, guard: tuple[bool | tuple[str, int], ...] | None, key: tuple | None
                 ) -> Specialization | None:
        """What code guarded by ``key`` may fold (None when not specialising)."""
        if self.specializer is None or guard is None or key is None:
            return None
        with self._lock:
            spec = self._specs.get(key)
        if spec is None:
            # (outside the lock: a background build must not hold up the request path)
            spec = self.specializer.specialize(key)
        with self._lock:
            spec = self._specs.setdefault(key, spec)
            self._specs.move_to_end(key)
            while self.maxsize is not None and len(self._specs) > self.maxsize:
                self._specs.popitem(last=False)
        return spec

    def hoisting_for(self, arena_slots: frozenset[int], spec: Specialization | None
                     ) -> Hoisting | None:
        if self.hoister is None or not arena_slots:
            return None
        return self.hoister.plan_for(arena_slots, spec, self.not_views)

    def refuse(self, node: Node) -> None:
        """Never hoist ``node`` again (its result was not a view of its arena tensor)."""
        with self._lock:
            self.not_views = self.not_views | {node}

    def _cache_key(self, arena_slots: frozenset[int], layout_id: int | None,
                   guard: tuple[bool | tuple[str, int], ...] | None, key: tuple | None
                   ) -> tuple:
        specialized = self.specializer is not None and guard is not None and key is not None
        return (layout_id, arena_slots, guard, key if specialized else None, self.not_views)

    def get(self, arena_slots: frozenset[int], layout_id: int | None,
            guard: tuple[bool | tuple[str, int], ...] | None = None, key: tuple | None = None) -> GeneratedCode:
        cache_key = self._cache_key(arena_slots, layout_id, guard, key)
        with self._lock:
            code = self._items.get(cache_key)
            if code is not None:
                self._items.move_to_end(cache_key)
        if code is None:
            # Specialised and generated outside the lock (a background build holds it for
            # tens of milliseconds otherwise); two threads may both make it: one is kept.
            spec = self.spec_for(guard, key)
            made = generate(self.plan, arena_slots, self.title, guard, spec=spec,
                            hoisting=self.hoisting_for(arena_slots, spec))
            with self._lock:
                self.generated += 1
                code = self._items.setdefault(cache_key, made)
                self._items.move_to_end(cache_key)
                while self.maxsize is not None and len(self._items) > self.maxsize:
                    self._items.popitem(last=False)
        self.latest = code
        return code

    def generic(self, arena_slots: frozenset[int], record: bool = False,
                program: Any = None, ahead: bool = False) -> GeneratedCode:
        """The code for any signature with these values in the arena: no guard, nothing a
        size decides folded, no views taken ahead (the arena tensors' shapes are the
        layout's, whichever it is). ``record``: the variant that also stores every value
        into the executor's value array (``generate``). ``program``: the shape program that
        made the layouts it serves, whose ``spec`` (ranks, dtypes, branches its guards
        decide) it folds. ``ahead``: made before any call runs it (``mod.code`` keeps
        showing what runs)."""
        spec = getattr(program, "spec", None)
        key = (arena_slots, record, id(program) if spec is not None else None)
        with self._lock:
            code = self._generic.get(key)
        if code is None:
            made = generate(self.plan, arena_slots, self.title, record=record, spec=spec,
                            structural=spec is not None)
            with self._lock:
                self.generated += 1
                if spec is not None:
                    self._programs[id(program)] = program  # (its id stays its own)
                code = self._generic.setdefault(key, made)
        if not (record or ahead):
            self.latest = code
        return code

    def pending(self, arena_slots: frozenset[int], layout_id: int,
                guard: tuple[bool | tuple[str, int], ...], key: tuple) -> Pending | None:
        """What the generic code serving this signature and layout waits for: None if the
        signature's own code exists already."""
        cache_key = self._cache_key(arena_slots, layout_id, guard, key)
        if cache_key in self._items:  # (a dict lookup: atomic, no lock needed)
            return None
        return Pending(cache_key, layout_id, self.not_views, (arena_slots, layout_id, guard, key))

    def note_call(self, pending: Pending) -> bool:
        """Count a call the generic code served for ``pending``'s signature (once per call of
        the generic code: keep it cheap); once the signature is hot, have its own code built
        in the background. Whether the caller should bind again: that code is ready (or the
        views refused since changed the code's key)."""
        if pending.cache_key in self._items or pending.not_views is not self.not_views:
            return True
        if self.hot is not None and self.hot.note(pending.layout_id):
            self.builder.submit(pending.cache_key, lambda: self.get(*pending.build))
        return False


@dataclass(frozen=True)
class Pending:
    """A signature the generic code serves until its own code is built."""

    #: the key its own code will have in ``CodeCache``
    cache_key: tuple
    #: what its calls are counted by (its layout stands for its signature: one per signature)
    layout_id: int
    #: the views refused when the key was made (another set makes another key)
    not_views: frozenset
    #: ``CodeCache.get``'s arguments that build its own code
    build: tuple


#: the most layouts' bound functions one runtime keeps (``CodegenExecutor._bindings``)
_MAX_BINDINGS = 256


class CodegenExecutor(Interpreter):
    """Runs calls through generated code; a call that records a new signature's sizes goes
    through the reference interpreter (it needs the value array to observe them)."""

    def __init__(self, plan: ExecutionPlan, memory: MemoryConfig | None, codes: CodeCache):
        super().__init__(plan, memory)
        self.codes = codes
        self._fast: Callable[..., list[Any]] | None = None
        self._code: GeneratedCode | None = None
        self._direct = False
        self._plain_outputs = False
        #: the signature the generic code serves until its own is ready (None: the bound
        #: code is the signature's own)
        self._pending: Pending | None = None
        #: specialising although memory is not planned per signature (so ``prepare`` keeps
        #: no key): the executor keeps the signature itself
        self._own_key = codes.specializer is not None and not (
            memory is not None and self._managed)
        #: id of a layout → (layout, fast, code, direct, plain outputs, pending, unkept):
        #: what ``_bind`` made for it, reused while the layout's tensors are
        self._bindings: dict[int, tuple] = {}

    def prepare(self, inputs: list[Any]) -> None:
        super().prepare(inputs)
        if self._own_key:
            key = signature(inputs)
            if key != self._key:
                self._key = key
                self._fast = None

    def install(self, layout) -> bool:
        reused = super().install(layout)
        held = self._bindings.get(id(layout))
        if (reused and held is not None and held[0] is layout
                and held[6] == self.unkept):
            # this layout's function, bound before to these very tensors
            _, self._fast, self._code, self._direct, self._plain_outputs, self._pending, _ = held
        else:
            self._fast = None
        return reused

    def run(self, inputs: list[Any]) -> list[Any]:
        fast = self._fast
        if fast is not None and self._direct:
            # Steady state: the generated code checks the signature itself.
            try:
                outputs = fast(*inputs)
            except SignatureChanged:
                pass
            except BaseException as e:
                self._annotate(e)
                raise
            else:
                if self._plain_outputs:
                    return outputs
                return self.finish(outputs, inputs)
        self.prepare(inputs)
        if self._recording and self._recorded_before():
            return self._run_recording(inputs)
        if self._recording or self._verifying:
            # (recording: the value array is observed; verifying: out variants checked)
            return self._run_reference(inputs)
        if (self._pending is not None and self._fast is not None
                and self.codes.note_call(self._pending)):
            self._fast = None  # the signature's own code is ready: bind it
        fast = self._fast or self._bind()
        try:
            outputs = fast(*inputs)
        except BaseException as e:
            self._annotate(e)
            raise
        return self.finish(outputs, inputs)

    def _recorded_before(self) -> bool:
        """Whether this signature's recording call may run generated code: its structure
        (dtypes, ranks, other values) was recorded by the reference interpreter before, so
        every out variant it reaches has been checked (``runtime/checks.py``)."""
        return self.memory is not None and structure(self._key) in self.memory.structures

    def _run_recording(self, inputs: list[Any]) -> list[Any]:
        """A new signature of a known structure: the generic code with nothing in the arena,
        storing each value into the value array for the planner (as fast as a call that
        allocates; the reference interpreter pays per node for what it does generally)."""
        code = self.codes.generic(frozenset(), record=True)
        self._code = code
        values = self.values
        for slot, x in zip(self.plan.block.inputs, inputs):
            values[slot] = x
        fn = code.factory(self._refused, self._key, values)
        try:
            outputs = fn(*inputs)
            # Every value is in the array now: if a managed node met arguments whose kind
            # (dtypes, ranks) its out variant was not checked for, the layout's first call
            # from the arena checks it (a verifying call).
            self._record_checked = self._checks is None or self._checks.all_checked(
                self.plan, values)
            return self.finish(outputs, inputs)
        except BaseException as e:
            self._annotate(e)
            raise
        finally:
            self._record_checked = True
            self.clear()

    def _run_reference(self, inputs: list[Any]) -> list[Any]:
        values = self.values
        for slot, x in zip(self.plan.block.inputs, inputs):
            values[slot] = x
        try:
            self.run_block(self.plan.block)
            return self.end(inputs)
        finally:
            self.clear()

    def _arena_slots(self) -> frozenset[int]:
        values = self.values
        return frozenset(s for s in self._managed
                         if values[s] is not None and s not in self.unkept)

    def profiled_function(self, timed: frozenset[int] | None) -> tuple[Callable[..., Any], bool]:
        """The profiler's copy of the generated function for the current layout (call
        ``prepare`` first), and whether a call needs ``prepare`` before it (as ``run``
        does); call ``finish`` after. With ``timed`` (node indices) it returns
        ``(outputs, stamps)`` (see ``generate``). Exceptions are then mapped to nodes through it: meant for an
        executor of the profiler's own."""
        self._fast or self._bind()
        guard = self._guard()
        arena = self._arena_slots()
        spec = self.codes.spec_for(guard, self._key)

        def make() -> GeneratedCode:
            return generate(self.plan, arena, self.codes.title, guard, timed=timed, spec=spec,
                            hoisting=self.codes.hoisting_for(arena, spec))

        return self._instantiate(make), not self._direct

    def _instantiate(self, make: Callable[[], GeneratedCode]) -> Callable[..., list[Any]]:
        """``make()``'s code bound to this runtime's arena tensors; generated again without
        a hoisted node whose result turned out not to be a view (``HoistRefused``)."""
        while True:
            code = make()
            try:
                fn = code.factory(*[self.values[s] for s in code.arena_slots], self._refused,
                                  self._key)
            except HoistRefused as e:
                self.codes.refuse(e.node)
                continue
            self._code = code
            return fn

    def _guard(self) -> tuple[bool, ...] | None:
        # Check the signature inside the generated code when memory is planned per
        # signature and no output arena needs its own check before a call.
        guarded = self._key is not None and not (self.layout and self.layout.outputs)
        if not guarded:
            return None
        # The direct tensor check only for inputs typed ``Tensor``: an ``Optional[Tensor]``
        # may be None on the next call (``_sig`` compares anything).
        guard = tuple(_guard_kind(k, v.type) for k, v in zip(self._key, self.plan.graph.inputs))
        if self._own_key:
            # Checking the signature costs time on every call: only worth it when the code
            # for this signature folds something (otherwise the generic code runs, as it
            # would with specialisation off).
            spec = self.codes.spec_for(guard, self._key)
            if not (spec.known or spec.taken or spec.dropped):
                return None
        return guard

    def _bind(self) -> Callable[..., list[Any]]:
        arena = self._arena_slots()
        layout_id = id(self.layout) if self.layout is not None else None
        guard = self._guard()
        codes = self.codes
        self._pending = None
        if (guard is not None and codes.hot is not None and self._key is not None
                and layout_id is not None and not self._own_key):
            self._pending = codes.pending(arena, layout_id, guard, self._key)
        if self._pending is not None:
            # A signature not (yet) hot: the shared generic code serves it.
            codes.note_call(self._pending)
            program = self.layout.program
            self._fast = self._instantiate(lambda: codes.generic(arena, program=program))
            self._direct = False
            self._plain_outputs = False
            return self._keep_binding()
        guarded = guard is not None
        self._fast = self._instantiate(
            lambda: self.codes.get(arena, layout_id, guard, self._key))
        # ``_direct``: the fast path may skip ``prepare`` (nothing to check outside the code).
        self._direct = guarded or not (self.memory is not None and self._managed)
        self._plain_outputs = not self.plan.copied_outputs and not (
            self.layout is not None and self.layout.outputs)
        return self._keep_binding()

    def _keep_binding(self) -> Callable[..., list[Any]]:
        layout = self.layout
        if layout is not None:
            if len(self._bindings) >= _MAX_BINDINGS:
                self._bindings.clear()
            self._bindings[id(layout)] = (layout, self._fast, self._code, self._direct,
                                          self._plain_outputs, self._pending,
                                          frozenset(self.unkept))
        return self._fast

    def _refused(self, e: RuntimeError, slot: int, fn: Callable[..., Any], *args: Any) -> Any:
        """Called by generated code when an out variant failed: if PyTorch refused to grow
        an arena tensor, allocate this value from now on (new code next call)."""
        if not _is_refused_resize(e):
            raise e
        self.unkept.add(slot)
        self._fast = None
        return fn(*args)

    def _annotate(self, e: BaseException) -> None:
        code = self._code
        if code is None:
            return
        tb, lineno = e.__traceback__, None
        while tb is not None:
            if tb.tb_frame.f_code.co_filename == code.filename:
                lineno = tb.tb_lineno
            tb = tb.tb_next
        for pn in code.nodes_at(lineno) if lineno is not None else ():
            annotate(e, pn)


def stamp_layout(timed: frozenset[int]) -> list[tuple[int, int]]:
    """For the readings of a function generated with ``timed``: ``(node, start index)`` per
    timed node, its time being ``stamps[start + 1] - stamps[start]``; the last reading
    (before the return) is ``stamps[-1]``."""
    layout, index = [], -1
    for k in sorted(timed):
        if k - 1 not in timed:
            index += 1  # the reading before k
        layout.append((k, index))
        index += 1  # the reading after k
    return layout
