"""What the code of a shape program's layouts folds and keeps (``structure_spec``): the
scalars every call the program's guards admit has in common, the branches they decide, the
values a layout's first call computes and its binding keeps, and the views of arena tensors
it keeps with them; never what object state or a written constant gives."""

from __future__ import annotations

from typing import Any

import torch

from static_runtime.ir import schema as S
from static_runtime.passes.effects import has_side_effects, is_nondeterministic
from static_runtime.runtime.facts import CONST_TYPES, Const, SeqFact, Specialization
from static_runtime.runtime.liveness import Liveness
from static_runtime.runtime.plan import Control, ExecutionPlan
from static_runtime.runtime.specialize import Specializer
from static_runtime.runtime.symbolic_run import Runner

#: operators whose results depend on strides: the guards on the inputs' strides hold when a
#: layout is made, not on later calls of its sizes, so nothing is folded in a graph with one
_STRIDE_KINDS = frozenset({"aten::stride", "aten::is_contiguous",
                           "aten::is_non_overlapping_and_dense", "prim::is_contiguous"})


def structure_spec(plan: ExecutionPlan, runner: Runner, values: list[Any]
                    ) -> Specialization | None:
    """What every call the program's guards admit has in common beyond its sizes: the
    scalars the run computed without a size symbol in them (ranks, dtypes, sizes the guards
    fixed) and the branches it took. The generic code for the program's layouts folds them
    (``CodeCache.generic``)."""
    if any(pn.kind.split(".")[0] in _STRIDE_KINDS for pn in plan.nodes()):
        return None
    specializer = Specializer(plan)
    # What object state or a written constant gives may differ on the next call of the same
    # sizes: never folded, no branch on it decided, never kept.
    volatile = _volatile(plan, specializer)
    spec = Specialization(taken={node: k for node, k in runner.taken.items()
                                 if plan.slot_of[node.inputs[0]] not in volatile})
    for slot in runner.produced:
        if slot in plan.constants or slot in volatile:
            continue
        v = values[slot]
        fact = _fact_of(v)
        if fact is not None and specializer.stable(slot, fact):
            spec.known[slot] = v
    for pn in plan.nodes():
        # nothing an effectful or writing node computes is folded, nor what a list written
        # later holds (``stable``)
        if has_side_effects(pn.node) or specializer.db.writes(pn.node):
            for out in pn.outputs:
                spec.known.pop(out, None)
    Liveness(specializer, spec, set()).top(plan.block)
    # What the signature alone decides (offsets ``arange(0, n * k, k)``, a slice of a
    # constant buffer by a length, a length read back from a tensor, the sizes read from an
    # input): computed on a layout's first call, then kept by its code. A tensor the plan
    # places in the arena is then made by the allocating form, once per layout: its region
    # is shared with other values, which would overwrite it.
    for pn in _straight_line(plan.block, spec):
        out = pn.outputs[0] if len(pn.outputs) == 1 else None
        v = values[out] if out is not None else None
        limit = MEMO_ARENA_ELEMENTS if pn.managed else MEMO_ELEMENTS
        kept = (isinstance(v, torch.Tensor) and _hint_numel(v) <= limit) or (
            isinstance(v, _MEMO_SCALARS) and not isinstance(v, bool)
            and pn.kind != "prim::ListConstruct")
        if (kept and out in runner.signature_only and out not in volatile
                and pn.control is Control.NONE and pn.node not in spec.dropped
                and out not in spec.known
                and not has_side_effects(pn.node) and not is_nondeterministic(pn.node)
                and specializer.shareable(out)):
            spec.memo.add(pn.node)
    spec.memo_views = _kept_views(plan, spec, runner, specializer, volatile)
    return spec


def _kept_views(plan: ExecutionPlan, spec: Specialization, runner: Runner,
                specializer: Specializer, volatile: set[int]) -> set:
    """``Specialization.memo_views``: top-level nodes whose result may be a view of their
    first argument (its schema says the result aliases it: ``slice``, ``transpose``, but also
    ``reshape``, ``contiguous`` or ``to``, which copy when the strides or dtype ask for it),
    that argument a managed value or such a result, the other arguments decided by the
    signature alone, where nothing changes the metadata of the value or of the result, and
    the caller never gets it. The code keeps a result only if its layout's first call made
    a view (``codegen.nodes``)."""
    # (a value whose out variant may hand back a result of its own is not always the arena
    # tensor: ``registry.hands_back``)
    managed = set(plan.managed_slots) - plan.handing_back()
    viewed: set[int] = set()
    kept = set()
    db = specializer.db
    steady = specializer.keeps_shape

    def decided(slot: int) -> bool:
        return slot in plan.constants or slot in spec.known or (
            slot in runner.signature_only and slot not in volatile)

    for pn in plan.block.nodes:
        if (len(pn.outputs) != 1 or pn.managed or pn.control is not Control.NONE
                or pn.node in spec.dropped or pn.node.schema is None or not pn.inputs):
            continue
        info = S.parse(pn.node.schema)
        if not info.views_first_argument() or info.returns[0].type != "Tensor":
            continue
        src, out = pn.inputs[0], pn.outputs[0]
        if ((src in managed or src in viewed) and src not in volatile
                and all(decided(s) for s in pn.inputs[1:]) and steady(src) and steady(out)
                and not db.may_alias_graph_output(specializer.value(out))):
            viewed.add(out)
            kept.add(pn.node)
    return kept


#: constants that change only through a write the alias analysis sees (a layout constant,
#: which ``torch.export`` keeps, is one: not an object with state)
_PLAIN = (*CONST_TYPES, torch.Tensor, list, tuple, dict)


def _volatile(plan: ExecutionPlan, specializer: Specializer) -> set[int]:
    """Slots whose value two calls of one signature may see differently although nothing
    they compute from is data: what is read from an object's attributes (a module that
    counts its calls), from a constant something writes (a buffer updated in place, a list
    appended to), and everything computed from those."""
    changing = set()
    for slot, const in plan.constants.items():
        v = specializer.value(slot)
        if not isinstance(const, _PLAIN):
            changing.add(slot)  # an object: state its methods and attributes may change
        elif v is not None and specializer.db.writers(v):
            changing.add(slot)  # a buffer updated in place, a list appended to
    nodes = plan.nodes()
    while True:  # (until no branch hands a changing value out: nested blocks come later)
        before = len(changing)
        for pn in nodes:
            if (pn.kind == "prim::GetAttr" or any(i in changing for i in pn.inputs)
                    or any(o in changing for b in pn.blocks for o in b.outputs)):
                changing.update(pn.outputs)
        if len(changing) == before:
            return changing


def _straight_line(block: Any, spec: Specialization) -> Any:
    """The nodes every call runs: the top level's, and those of the branches ``spec``
    decides (which the code runs in line)."""
    for pn in block.nodes:
        k = spec.taken.get(pn.node) if pn.control is Control.IF else None
        if k is not None:
            yield from _straight_line(pn.blocks[k], spec)
        else:
            yield pn


#: the most elements a tensor kept per layout may have (``Specialization.memo``)
MEMO_ELEMENTS = 1 << 16
#: the most for a value the plan puts in the arena: kept, it is memory of its own per layout
#: (and per runtime), where the arena would share its region with other values
MEMO_ARENA_ELEMENTS = 1 << 10
#: the scalars kept per layout (sizes, and what is computed from them)
_MEMO_SCALARS = (int, float, torch.SymInt, torch.SymFloat)


def _hint_numel(t: torch.Tensor) -> int:
    n = t.numel()
    return n if isinstance(n, int) else int(n.node.hint)


def _fact_of(v: Any) -> Any:
    if type(v) in CONST_TYPES:
        return Const(v)
    if isinstance(v, (list, tuple)) and all(type(e) in CONST_TYPES for e in v):
        return SeqFact(type(v), tuple(Const(e) for e in v))
    return None
