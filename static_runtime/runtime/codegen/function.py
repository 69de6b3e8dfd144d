"""The whole generated function: the emitter's state (names, globals, the value each slot
reads as), the factory around ``run`` with its header, and ``generate``, which compiles it
and registers its source so tracebacks show it and name the IR node of each line."""

from __future__ import annotations

import itertools
import linecache
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from static_runtime.ir.graph import Node, Value
from static_runtime.ops.native.scalars import _wrap as wrap_int64
from static_runtime.runtime.codegen.control import ControlFlowEmission
from static_runtime.runtime.codegen.names import Names, literal
from static_runtime.runtime.codegen.nodes import NodeEmission, absorbed_lists
from static_runtime.runtime.codegen.prologue import PrologueEmission
from static_runtime.runtime.hoist import Hoisting, shares_storage
from static_runtime.runtime.plan import ExecutionPlan, ProcessedNode
from static_runtime.runtime.specialize import Specialization

_counter = itertools.count()


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

    def nodes_at(self, lineno: int | None) -> tuple[ProcessedNode, ...]:
        return self.line_to_node.get(lineno, ())


class Emitter(NodeEmission, ControlFlowEmission, PrologueEmission):
    """Writes the source of one generated function for a plan and arena layout."""

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
        #: per binding kept tensors the signature alone decides (``Specialization.memo``)
        self.memo_names: list[str] = []
        #: kept views of arena tensors → their names; arena slot → the names its refused
        #: write resets (``plan_kept_views``)
        self.view_memos: dict = {}
        self.view_resets: dict[int, list[str]] = {}
        #: slot of a kept view → its memo's name (its readers keep theirs only if it is kept)
        self.kept_view_of: dict[int, str] = {}
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
        self.names = Names()
        self.names.used.update({"_refused", "_key", "_rec", "_sig", "SignatureChanged", "_clock",
                                "_hoist", "_dirty", "_at", "_hoisted", "_check_hoisted",
                                "HoistRefused", "_t", "_wrap64", "_shares", "_memo"})
        self.globals: dict[str, Any] = {"_wrap64": wrap_int64, "_shares": shares_storage}
        self.lines: list[str] = []
        self.line_nodes: dict[int, tuple[ProcessedNode, ...]] = {}
        self.stack: list[ProcessedNode] = []  # enclosing control-flow nodes
        self.expr: dict[int, str] = {}  # slot → expression that reads it
        value_of = {slot: value for value, slot in plan.slot_of.items()}
        self.value_of: dict[int, Value] = value_of
        for slot, const in plan.constants.items():
            lit = literal(const)
            if lit is None:
                lit = self.bind(const, f"c_{value_of[slot].name}")
            self.expr[slot] = lit
        #: slots bound to a local name (what ``del`` may release)
        self.defined: set[int] = set()
        if spec is not None:
            for slot, value in spec.known.items():
                lit = literal(value)
                self.expr[slot] = lit if lit is not None else self.bind(
                    value, f"k_{value_of[slot].name}")
        self.arena_names = {s: self.names.fresh(f"m_{value_of[s].name}") for s in sorted(arena)}
        #: list slots built by a ``prim::ListConstruct`` that only spreading calls read: the
        #: list is never built, each call takes its elements (``OpImpl.spread``)
        self.absorbed: dict[int, tuple[int, ...]] = absorbed_lists(plan, spec)

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


    def plan_kept_views(self) -> None:
        """Names for the views this code keeps per binding (``Specialization.memo_views``
        whose value is an arena tensor of this code's layout, or a kept view of one), and,
        per arena value, the names a refused write into it resets."""
        spec = self.spec
        if spec is None or not spec.memo_views:
            return
        root: dict[int, int] = {}
        for pn in self.plan.block.nodes:
            if pn.node in spec.memo_views and pn.node not in spec.dropped:
                src = pn.inputs[0]
                r = src if src in self.arena else root.get(src)
                if r is not None:
                    root[pn.outputs[0]] = r
                    name = self.new_memo()
                    self.view_memos[pn.node] = name
                    self.kept_view_of[pn.outputs[0]] = name
                    self.view_resets.setdefault(r, []).append(name)

    def new_memo(self) -> str:
        """Where the code keeps one more value per binding: an element of ``_memo``."""
        name = f"_memo[{len(self.memo_names)}]"
        self.memo_names.append(name)
        return name

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
            "# input signature it was planned for (run's defaults, after its inputs).",
            f"def _factory({', '.join([*self.arena_names.values(), *factory_extra])}):",
        ]
        checks = self.signature_guard(params, header)
        self.lines = []
        if self.hoisting:
            header += self.hoist_prologue()
            self.line_nodes.clear()  # the factory's lines are not the run's
        # What ``run`` reads of the factory's scope and never assigns, as positional
        # defaults rather than closure cells: one tuple per binding instead of a cell per
        # name (~85 on a small text encoder), which the cyclic garbage collector would track
        # for every size a layout cache keeps — the same speed per call. (Safe: ``run`` is
        # only called with exactly its inputs.)
        # The hoisted views too: a refused write retakes them for the rest of that call only
        # (it sets ``_dirty``, and the next call hands back to the general path).
        bound = [*self.arena_names.values(), *factory_extra, *self.guard_names,
                 *self.hoisted_names]
        header.append(f"    def run({', '.join([*params, *(f'{b}={b}' for b in bound)])}):")
        if self.hoisting:
            header.append("        nonlocal _dirty")
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
        self.plan_kept_views()
        self.block(plan.block, 2, top=True)
        if self.memo_names:
            # (the values kept per binding: their names are known once the body is made)
            # (one list per binding, ``run``'s default: not a closure cell per value, which
            # the garbage collector would track for every size a layout cache keeps)
            at = next(k for k, line in enumerate(header) if line.startswith("    def run("))
            header[at] = header[at].removesuffix("):") + ", _memo=_memo):"
            header.insert(at, f"    _memo = [None] * {len(self.memo_names)}")
            specialised_at = 1
            header.insert(specialised_at + len(specialised), (
                f"# {len(self.memo_names)} values the signature alone decides (tensors, sizes) "
                "made on a binding's first call (_memo), then kept."))
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
    emitter = Emitter(plan, arena_slots, title, guard, timed, spec, hoisting, record)
    source = emitter.function()
    filename = f"<static_runtime generated {next(_counter)}>"
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    namespace = dict(emitter.globals)
    exec(compile(source, filename, "exec"), namespace)  # noqa: S102  (our own generated code)
    return GeneratedCode(source, namespace["_factory"], filename, emitter.line_nodes,
                         tuple(emitter.arena_names))


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
