"""Per-node-kind comparison of our runtime with PyTorch's C++ Static Runtime.

Both runtimes' ``benchmark_individual_ops`` time every top-level node of their prepared
graph (a ``prim::If``/``prim::Loop`` node's time includes its blocks) and report, per node
kind, the total over its instances in milliseconds per call — as a mean over the runs.
``compare`` runs both on the same inputs in the same process, alternated, takes each
kind's total in each single run (ours: ``metrics.node_samples``; PyTorch's: its
``benchmark_individual_ops`` with one main run, called once per run) and keeps the median
over the runs; ``kind_rows`` (a pure function) lines the kinds up: instances on each
side, µs per instance on each side, the difference per instance and what the kind costs us
per call (our total minus theirs; equal to the difference × instances when both sides have
the same instances). A row ``OUTSIDE`` holds what a profiled call spends outside its
nodes — memory setup, the release after the last node, dropping the outputs, as each
runtime's ``benchmark_individual_ops`` reports those phases (binding the arguments, its
``setup_time``, is in neither; for an event profile: the call minus its operators) — so the
rows add up to a whole profiled call.

Kinds are matched after mapping each to the operator it stands for (``KIND_MAP``, applied
to both sides, keyed by kind only): each runtime's preparation renames some operators —
ours specialises ``aten::add`` with ``alpha=1`` to ``static_runtime::add`` and makes
``cat``/``stack`` variadic; PyTorch's (``torch/csrc/jit/runtime/static/passes.cpp``) turns
``reshape`` into ``static_runtime::reshape_copy``, ``to`` into ``to_maybe_copy_out`` +
``select_tensor``, merges ``TupleUnpack`` runs into ``VarTupleUnpack`` and constant-key
dict lookups into ``dict_unpack``. A node that fuses several operators into one
(``FUSED_KINDS``: our ``static_runtime::attention``, PyTorch's ``signed_log1p``) keeps its
own row, with the other side empty; so do kinds only one side has. (Our
``conv2d_pointwise``, a convolution that may carry the relu after it, counts as
``aten::conv2d``: the relu row then shows fewer instances on our side.)

Where the C++ runtime cannot be profiled — its constructor refuses the graph, or its
Python binding of ``benchmark_individual_ops`` cannot take the arguments (it accepts tensors
only) — ``compare`` says why in ``note`` and compares with TorchScript's own interpreter
(the frozen module) under ``torch.autograd.profiler`` instead; for a ``torch.export``
program, which no C++ Static Runtime runs, with eager PyTorch on the program. Those
profiles are measured differently (``profile_events``): each top-level operator event
(an operator called by the interpreter or the Python code, not from inside another
operator) is one instance, so an operator inside a loop counts once per iteration, and
operators the interpreter runs without a dispatcher call (``prim::ListConstruct``,
``aten::size``...) are not seen (their time is in ``OUTSIDE``); the profiler's own cost per
event (~1-2 µs) is inside every time.
"""

from __future__ import annotations

import statistics
import warnings
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

import static_runtime as sr
from static_runtime.compare.quiet import _quiet_stderr
from static_runtime.compare.runner import _reason

#: The row for what a whole profiled call spends outside its nodes.
OUTSIDE = "(outside the nodes)"

#: What a runtime-specific kind stands for, applied to both sides' kinds. Ours (passes/):
#: alpha specialisation, variadic cat/stack/TupleUnpack, in-place relu. PyTorch's C++ Static
#: Runtime (passes.cpp and ops.cpp of torch/csrc/jit/runtime/static, as registered in the
#: installed torch under the ``static_runtime`` namespace): copy variants of views and
#: casts, the ``to`` pair, variadic unpacks, ops with unused outputs removed.
KIND_MAP: dict[str, str] = {
    # ours
    "static_runtime::add": "aten::add",
    "static_runtime::sub": "aten::sub",
    "prim::VarConcat": "aten::cat",
    "prim::VarStack": "aten::stack",
    "prim::VarTupleUnpack": "prim::TupleUnpack",
    "aten::relu_": "aten::relu",
    # a convolution on oneDNN's layout, sometimes with the relu after it fused (that relu's
    # row then has fewer instances on our side)
    "static_runtime::conv2d_pointwise": "aten::conv2d",
    # a linear with a large weight, sometimes with the activation after it fused
    "static_runtime::linear_pointwise": "aten::linear",
    # PyTorch's C++ Static Runtime
    "static_runtime::to_copy": "aten::to",
    "static_runtime::to_maybe_copy_out": "aten::to",
    "static_runtime::select_tensor": "aten::to",
    "static_runtime::reshape_copy": "aten::reshape",
    "static_runtime::flatten_copy": "aten::flatten",
    "static_runtime::permute_copy": "aten::permute",
    "static_runtime::expand_dims_copy": "fb::expand_dims",
    "static_runtime::dequantize_copy": "aten::dequantize",
    "aten::narrow_copy": "aten::narrow",
    "static_runtime::layer_norm": "aten::layer_norm",
    "static_runtime::embedding_bag": "aten::embedding_bag",
    "static_runtime::VarTupleUnpack": "prim::TupleUnpack",
    "static_runtime::dict_unpack": "aten::__getitem__",
    "static_runtime::fused_equally_split": "fb::equally_split",
}

#: Kinds whose time belongs to another node's operator but which are nodes of their own:
#: their time is added to the kind they map to, their instances are not counted (the C++
#: runtime runs ``to`` as ``to_maybe_copy_out`` followed by ``select_tensor``: one ``to``).
COMPANION_KINDS: frozenset[str] = frozenset({"static_runtime::select_tensor"})

#: Nodes that fuse several operators; they keep their own rows. What each stands for:
FUSED_KINDS: dict[str, str] = {
    "static_runtime::attention": "matmul(softmax(matmul(q, k) * s), v) (ours)",
    "static_runtime::signed_log1p": "sign(x) * log1p(abs(x)) (C++ SR)",
    "static_runtime::clamp_nan_to_num": "nan_to_num(clamp(x)) (C++ SR)",
    "static_runtime::fused_split_and_squeeze_copy": "split + ListUnpack + squeeze (C++ SR)",
    "static_runtime::create_owned_ref": "a reference the C++ runtime's blocks return (C++ SR)",
}


def canonical_kind(kind: str) -> str:
    """The kind a row is keyed by: ``KIND_MAP[kind]``, else ``kind`` itself."""
    return KIND_MAP.get(kind, kind)


@dataclass(frozen=True)
class KindProfile:
    """One runtime's profile per node kind, per call: ``us[kind]`` (all instances, µs),
    ``instances[kind]`` (nodes; for event profiles, operator calls per call) and
    ``outside_us`` (what a whole profiled call spends outside the nodes: binding, memory
    setup, release; the profiler's own loop). ``runtime`` names it, ``method`` says how it
    was measured."""

    runtime: str
    us: dict[str, float]
    instances: dict[str, float]
    outside_us: float
    method: str

    @property
    def total_us(self) -> float:
        """One whole profiled call."""
        return sum(self.us.values()) + self.outside_us


@dataclass(frozen=True)
class KindRow:
    """One kind of the comparison: ``ours_*`` and ``other_*`` (instances, µs for all of
    them per call; None where that side has no such kind) and the kinds of each side that
    were mapped to it."""

    kind: str
    ours_instances: float | None
    other_instances: float | None
    ours_us: float | None
    other_us: float | None
    ours_kinds: tuple[str, ...] = ()
    other_kinds: tuple[str, ...] = ()

    @staticmethod
    def _per(us: float | None, n: float | None) -> float | None:
        if us is None:
            return None
        return us / n if n else us

    @property
    def ours_us_per_instance(self) -> float | None:
        return self._per(self.ours_us, self.ours_instances)

    @property
    def other_us_per_instance(self) -> float | None:
        return self._per(self.other_us, self.other_instances)

    @property
    def diff_us_per_instance(self) -> float | None:
        a, b = self.ours_us_per_instance, self.other_us_per_instance
        return None if a is None or b is None else a - b

    @property
    def cost_us(self) -> float:
        """What this kind costs us per call: our total minus theirs (a side without the kind
        counts 0)."""
        return (self.ours_us or 0.0) - (self.other_us or 0.0)

    @property
    def stands_for(self) -> str:
        for k in (self.kind, *self.ours_kinds, *self.other_kinds):
            if k in FUSED_KINDS:
                return FUSED_KINDS[k]
        return ""

    def as_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "ours_kinds": list(self.ours_kinds),
                "other_kinds": list(self.other_kinds),
                "ours_instances": self.ours_instances, "other_instances": self.other_instances,
                "ours_us": self.ours_us, "other_us": self.other_us,
                "ours_us_per_instance": self.ours_us_per_instance,
                "other_us_per_instance": self.other_us_per_instance,
                "diff_us_per_instance": self.diff_us_per_instance, "cost_us": self.cost_us,
                "stands_for": self.stands_for}


def _grouped(p: KindProfile) -> dict[str, tuple[float, float, list[str]]]:
    """canonical kind → (instances, µs, original kinds)."""
    out: dict[str, list] = {}
    for kind, us in p.us.items():
        entry = out.setdefault(canonical_kind(kind), [0.0, 0.0, []])
        if kind not in COMPANION_KINDS:
            entry[0] += p.instances.get(kind, 0)
        entry[1] += us
        entry[2].append(kind)
    return {k: (n, us, sorted(kinds)) for k, (n, us, kinds) in out.items()}


def kind_rows(ours: KindProfile, other: KindProfile) -> list[KindRow]:
    """The comparison, one row per kind (after ``canonical_kind``), sorted by what the
    kind costs us per call, most first; the last row is ``OUTSIDE``. The rows' ``cost_us``
    add up to ``ours.total_us - other.total_us``."""
    a, b = _grouped(ours), _grouped(other)
    rows = []
    for kind in set(a) | set(b):
        na, ua, ka = a.get(kind, (None, None, []))
        nb, ub, kb = b.get(kind, (None, None, []))
        rows.append(KindRow(kind, na, nb, ua, ub, tuple(ka), tuple(kb)))
    rows.sort(key=lambda r: (-r.cost_us, r.kind))
    rows.append(KindRow(OUTSIDE, None, None, ours.outside_us, other.outside_us))
    return rows


# --------------------------------------------------------------------------- measuring


def _kind_totals(kinds: list[str], times: list[float]) -> dict[str, float]:
    out: dict[str, float] = defaultdict(float)
    for kind, t in zip(kinds, times):
        out[kind] += t
    return dict(out)


def profile_ours(mod: sr.StaticModule, args: tuple, kwargs: dict, warmup: int,
                 runs: int) -> list[KindProfile]:
    """One profile per run of our ``benchmark_individual_ops`` loop (``node_samples``: in a
    run every top-level node is timed once)."""
    from static_runtime.runtime.metrics import node_samples

    s = node_samples(mod.runtime(), args, kwargs, warmup, runs)
    counts = dict(Counter(s.kinds))
    return [KindProfile("static_runtime",
                        _kind_totals(s.kinds, [ns[r] / 1e3 for ns in s.ns]), counts,
                        s.outside_ns(r) / 1e3, "benchmark_individual_ops (ours)")
            for r in range(runs)]


def profile_cpp(sm: Any, args: tuple, kwargs: dict, warmup: int,
                runs: int) -> list[KindProfile]:
    """One profile per call of PyTorch's C++ Static Runtime (``sm``: a
    ``torch._C.StaticModule``): its ``benchmark_individual_ops`` with one main run, ``runs``
    times, after one with ``warmup`` warm-up runs."""
    args, kwargs = list(args), dict(kwargs)
    sm.benchmark_individual_ops(args, kwargs, max(warmup, 1), 1)
    out = []
    for _ in range(runs):
        m = sm.benchmark_individual_ops(args, kwargs, 1, 1)  # it needs a warm-up run
        us = {k: v * 1e3 for k, v in m.time_per_node_type.items()}
        # outside: the same phases as ours (its total_time is the sum of its nodes)
        outside = (m.memory_alloc_time + m.memory_dealloc_time + m.output_dealloc_time) * 1e3
        out.append(KindProfile("pytorch_static_runtime", us, dict(m.instances_per_node_type),
                               outside,
                               "benchmark_individual_ops (PyTorch's C++ Static Runtime)"))
    return out


def profile_events(fn: Callable[[], Any], runtime: str, warmup: int,
                   runs: int) -> list[KindProfile]:
    """Per-operator profiles of ``fn`` (one model call), one per call, from
    ``torch.autograd.profiler`` events: ``runs`` calls after ``warmup``, each in a
    ``record_function`` scope; each top-level operator event in a call (one whose enclosing
    event is not an operator: the call's scope, or a TorchScript function) is one instance of
    its name. Outside: the call's scope minus its operators."""
    from torch.autograd.profiler import profile, record_function

    with torch.inference_mode():
        for _ in range(warmup):
            fn()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            with _quiet_stderr(), profile() as p:
                for _ in range(runs):
                    with record_function(_CALL):
                        fn()
    calls = [e for e in p.function_events if e.name == _CALL]
    us: dict[int, dict[str, float]] = {id(c): defaultdict(float) for c in calls}
    counts: dict[int, Counter[str]] = {id(c): Counter() for c in calls}
    for e in p.function_events:
        parent = e.cpu_parent
        if "::" not in e.name or parent is None or "::" in parent.name:
            continue
        while parent.cpu_parent is not None and parent.name != _CALL:
            parent = parent.cpu_parent
        if parent.name != _CALL:
            continue
        us[id(parent)][e.name] += e.cpu_time_total
        counts[id(parent)][e.name] += 1
    return [KindProfile(runtime, dict(us[id(c)]), dict(counts[id(c)]),
                        c.cpu_time_total - sum(us[id(c)].values()),
                        "torch.autograd.profiler, top-level operator events")
            for c in calls]


_CALL = "static_runtime.compare.ops: one call"


def _median_profile(profiles: list[KindProfile]) -> KindProfile:
    """Each kind's median over ``profiles`` (a kind absent from one counts 0 there),
    instances likewise (events: a count per call), the median time outside the nodes."""
    kinds = {k for p in profiles for k in p.us}
    first = profiles[0]
    return KindProfile(
        first.runtime,
        {k: statistics.median(p.us.get(k, 0.0) for p in profiles) for k in kinds},
        {k: statistics.median(p.instances.get(k, 0) for p in profiles) for k in kinds},
        statistics.median(p.outside_us for p in profiles), first.method)


@dataclass
class OpComparison:
    """The result of ``compare``: ``rows`` (``kind_rows``), both profiles (medians over
    ``repeats``), ``against`` (``"pytorch_static_runtime"``, ``"torchscript"`` or
    ``"eager"``) and ``note`` (why it is not the C++ runtime, or empty)."""

    rows: list[KindRow]
    ours: KindProfile
    other: KindProfile
    against: str
    note: str = ""
    repeats: int = 0
    warmup: int = 0
    runs: int = 0
    details: dict[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return {"against": self.against, "note": self.note or None, "repeats": self.repeats,
                "warmup": self.warmup, "runs": self.runs,
                "ours": {"total_us": self.ours.total_us, "method": self.ours.method},
                "other": {"runtime": self.other.runtime, "total_us": self.other.total_us,
                          "method": self.other.method},
                "rows": [r.as_dict() for r in self.rows]}


def cpp_static_module(scripted: torch.jit.ScriptModule, args: tuple,
                      kwargs: dict) -> tuple[Any, str]:
    """PyTorch's C++ Static Runtime on the frozen module, and '' — or None and why it
    cannot be profiled here (its constructor refuses the graph; the Python binding of its
    ``benchmark_individual_ops`` takes tensors only)."""
    leaves = [*args, *kwargs.values()]
    if not all(isinstance(x, torch.Tensor) for x in leaves):
        kinds = sorted({type(x).__name__ for x in leaves if not isinstance(x, torch.Tensor)})
        return None, ("PyTorch's C++ Static Runtime cannot be profiled on these arguments: "
                      "the Python binding of its benchmark_individual_ops takes tensors only "
                      f"(got {', '.join(kinds)})")
    try:
        # (its log lines naming unsupported operators go to file descriptor 2: held back,
        # the refusal says it in one line)
        with warnings.catch_warnings(), _quiet_stderr():
            warnings.simplefilter("ignore")
            frozen = torch.jit.freeze(scripted.eval())
            sm = torch._C._jit_to_static_module(frozen._c)
    except Exception as e:  # noqa: BLE001  (a refusal is reported, not fatal)
        return None, f"PyTorch's C++ Static Runtime refuses the model ({_reason(e)})"
    return sm, ""


def _frozen_caller(scripted: torch.jit.ScriptModule, args: tuple,
                   kwargs: dict) -> Callable[[], Any]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        frozen = torch.jit.freeze(scripted.eval())
    return lambda: frozen(*args, **kwargs)


def compare(mod: sr.StaticModule, args: tuple, kwargs: dict | None = None, *,
            scripted: torch.jit.ScriptModule | None = None,
            eager: Callable[..., Any] | None = None, repeats: int = 5, warmup: int = 10,
            runs: int = 100) -> OpComparison:
    """Profile ``mod`` (ours) and a peer on ``args``/``kwargs`` and line the kinds up:
    ``runs`` profiled runs of each in all (a run: one call of the peer; one rotation of our
    profiler, in which each node is timed once), in ``repeats`` alternated blocks (the first
    after ``warmup`` calls); each kind's figure is the median over the runs of its total in
    a run. Medians, not means: on a busy machine a preemption lands inside one node's
    interval now and then and adds milliseconds to it, which a mean over the runs spreads
    over every kind it touches (seen: ×2–4 on every kind under load).

    The peer: PyTorch's C++ Static Runtime on ``scripted`` (a TorchScript module, frozen
    here); if it cannot be profiled, TorchScript's interpreter on the frozen ``scripted``
    under ``torch.autograd.profiler`` (``note`` says why). Without ``scripted``, ``eager``
    (a callable taking the arguments, e.g. an exported program's ``module()``) under the
    profiler."""
    if repeats < 1 or runs < 1:
        raise ValueError("repeats and runs must be at least 1")
    kwargs = dict(kwargs or {})
    note = ""
    if scripted is not None:
        sm, note = cpp_static_module(scripted, args, kwargs)
        if sm is not None:
            against = "pytorch_static_runtime"

            def other(w: int, n: int) -> list[KindProfile]:
                return profile_cpp(sm, args, kwargs, w, n)
        else:
            against = "torchscript"
            call = _frozen_caller(scripted, args, kwargs)

            def other(w: int, n: int) -> list[KindProfile]:
                return profile_events(call, against, w, n)
    elif eager is not None:
        against = "eager"

        def other(w: int, n: int) -> list[KindProfile]:
            return profile_events(lambda: eager(*args, **kwargs), against, w, n)
    else:
        raise ValueError("give scripted= (a TorchScript module) or eager= (a callable)")
    ours_p: list[KindProfile] = []
    other_p: list[KindProfile] = []
    per_repeat = max(1, -(-runs // repeats))
    for k in range(repeats):
        ours_p += profile_ours(mod, args, kwargs, warmup if k == 0 else 1, per_repeat)
        other_p += other(warmup if k == 0 else 1, per_repeat)
    ours, theirs = _median_profile(ours_p), _median_profile(other_p)
    return OpComparison(kind_rows(ours, theirs), ours, theirs, against, note, repeats, warmup,
                        runs)


def totals(rows: list[KindRow]) -> tuple[float, float]:
    """(ours, other) µs per call over all rows (``OUTSIDE`` included: the whole calls)."""
    return (sum(r.ours_us or 0.0 for r in rows), sum(r.other_us or 0.0 for r in rows))

