"""Facts of signature specialisation: what is known about a value on every call with one
input signature (a constant, a tensor's dtype, shape and device, a small tensor's value, a
sequence's elements), what a signature entry guarantees, the values that stand for facts
when an operator is run on them, and what code for the signature folds (``Specialization``)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import torch

from static_runtime.ir.graph import Node


@dataclass(frozen=True)
class Const:
    """The value is this constant (an int, bool, float, str, None or dtype)."""

    value: Any


@dataclass(frozen=True)
class TensorFact:
    """The value is a tensor of this dtype and shape, on ``device`` (None: unknown); its
    strides are unknown."""

    dtype: torch.dtype
    shape: tuple[int, ...]
    device: torch.device | None = None


@dataclass(frozen=True)
class ValueFact(TensorFact):
    """The value is a tensor equal to ``value`` on every call: small tensors computed from
    constants and the signature only (``prim::NumToTensor`` of a size, a slice of a constant
    buffer). The node computing it still runs when its tensor is used; the fact lets what
    is read from it (``aten::Int``) fold."""

    value: torch.Tensor | None = field(default=None, compare=False, repr=False)


#: The most bytes a tensor computed at specialisation may have (``ValueFact``); a graph
#: constant's value is a fact whatever its size (it is held anyway).
VALUE_FACT_BYTES = 64 * 1024


@dataclass(frozen=True)
class SeqFact:
    """The value is a list or tuple of exactly these elements (a fact or None each)."""

    type: type
    elems: tuple[Any, ...]


Fact = Const | TensorFact | SeqFact

#: Tensor metadata the key determines: evaluated on a meta tensor of the known dtype/shape.

CONST_TYPES = (int, float, str, bool, type(None), torch.dtype, torch.device, torch.layout,
               torch.memory_format)
CPU = torch.device("cpu")
META = torch.device("meta")
#: a value no fact stands for
UNKNOWN = object()


def key_fact(k: Any) -> Fact | None:
    """The fact a signature entry (``memory.cache._sig``'s form) guarantees, if any."""
    if isinstance(k, tuple) and len(k) == 2 and isinstance(k[0], torch.dtype):
        return TensorFact(k[0], tuple(k[1]), CPU)  # ``_sig``: no device means the CPU
    if isinstance(k, tuple) and len(k) == 3 and isinstance(k[0], torch.dtype):
        return TensorFact(k[0], tuple(k[1]), k[2])
    if k is type(None):
        return Const(None)
    if isinstance(k, tuple) and len(k) == 2:
        kind, v = k
        # ``_sig`` records ``type(x)``: only the exact builtin types are trusted.
        if kind in (int, bool, str) and type(v) is kind:
            return Const(v)
        if kind in (list, tuple) and isinstance(v, tuple):
            return SeqFact(kind, tuple(key_fact(e) for e in v))
    return None


def small(f: Fact) -> bool:
    if isinstance(f, TensorFact):
        return math.prod(f.shape) * f.dtype.itemsize <= VALUE_FACT_BYTES
    if isinstance(f, SeqFact):
        return all(e is None or small(e) for e in f.elems)
    return True


def has_value(f: Fact | None) -> bool:
    if isinstance(f, SeqFact):
        return all(has_value(e) for e in f.elems)
    return isinstance(f, (Const, ValueFact))


def fact_value(f: Fact | None, real: bool) -> Any:
    """A value standing for what ``f`` says: the value itself where known and ``real``,
    else a meta tensor for a tensor fact."""
    if isinstance(f, Const):
        # (on meta tensors, a device argument is the meta device: where they stand for)
        return META if not real and isinstance(f.value, torch.device) else f.value
    if isinstance(f, ValueFact) and real:
        return f.value
    if isinstance(f, TensorFact):
        return torch.empty(f.shape, dtype=f.dtype, device="meta")
    if isinstance(f, SeqFact):
        elems = [fact_value(e, real) for e in f.elems]
        if any(e is UNKNOWN for e in elems):
            return UNKNOWN
        return f.type(elems)
    return UNKNOWN


def tensor_fact(x: Any, real: bool = False, limit: bool = True,
                 device: torch.device | None = None) -> Fact | None:
    """The fact a run's result gives: tensors and lists of tensors only (with ``real``, a
    real tensor's value too: a small one's, or any one's without ``limit``). A meta run's
    tensors are on ``device``, if it is known."""
    if isinstance(x, torch.Tensor):
        where = device if x.is_meta else x.device
        if real and not x.is_meta and x.layout is torch.strided and (
                not limit or x.numel() * x.element_size() <= VALUE_FACT_BYTES):
            return ValueFact(x.dtype, tuple(x.shape), where, x)
        return TensorFact(x.dtype, tuple(x.shape), where)
    if isinstance(x, (list, tuple)) and x and all(isinstance(e, torch.Tensor) for e in x):
        return SeqFact(type(x), tuple(tensor_fact(e, device=device) for e in x))
    return None


def value_fact(x: Any) -> Fact | None:
    """The fact a run on real values gives: the value (a small tensor's, a scalar's, a
    list's of those)."""
    if isinstance(x, torch.Tensor):
        return tensor_fact(x, real=not x.is_meta)
    if type(x) in CONST_TYPES:
        return Const(x)
    if isinstance(x, (list, tuple)):
        elems = tuple(value_fact(e) for e in x)
        return SeqFact(type(x), elems) if all(e is not None for e in elems) else None
    return None


def trip_invariant(f: Fact | None) -> Fact | None:
    """What of ``f`` a loop's trips may keep: a tensor's dtype, shape and device (not its
    value), a tuple's elements' such facts; None for anything else."""
    if isinstance(f, TensorFact):
        return TensorFact(f.dtype, f.shape, f.device)
    if isinstance(f, SeqFact) and f.type is tuple:
        elems = tuple(trip_invariant(e) for e in f.elems)
        return SeqFact(tuple, elems) if any(e is not None for e in elems) else None
    return None


def implies(f: Fact | None, assumed: Fact) -> bool:
    """Whether every value ``f`` describes satisfies ``assumed`` (a ``trip_invariant``
    fact)."""
    if isinstance(assumed, TensorFact):
        return (isinstance(f, TensorFact) and f.dtype == assumed.dtype
                and f.shape == assumed.shape
                and (assumed.device is None or f.device == assumed.device))
    if isinstance(assumed, SeqFact):
        return (isinstance(f, SeqFact) and f.type is assumed.type
                and len(f.elems) == len(assumed.elems)
                and all(a is None or implies(e, a) for e, a in zip(f.elems, assumed.elems)))
    return False


def identity_fact(kind: str, a: Fact | None, b: Fact | None) -> Const | None:
    """``a is b`` / ``a is not b`` when one side is None and the other known to be None or
    known not to be (a tensor or a sequence)."""
    def none(f: Fact | None) -> bool | None:
        if isinstance(f, Const) and f.value is None:
            return True
        if isinstance(f, (TensorFact, SeqFact)):
            return False
        return None

    na, nb = none(a), none(b)
    if na is None or nb is None or not (na or nb):
        return None
    same = na and nb
    return Const(same if kind == "aten::__is__" else not same)


def known_scalars(f: Fact | None) -> bool:
    """A known scalar, or a known list or tuple of them."""
    if isinstance(f, SeqFact):
        return all(isinstance(e, Const) for e in f.elems)
    return isinstance(f, Const)


@dataclass
class Specialization:
    """What generated code for one input signature folds and leaves out."""

    #: slot → the constant it holds on every call with this signature
    known: dict[int, Any] = field(default_factory=dict)
    #: ``prim::If`` node → the index of the branch taken on every such call
    taken: dict[Node, int] = field(default_factory=dict)
    #: nodes whose results nobody needs once the above is folded (not emitted)
    dropped: set[Node] = field(default_factory=set)
    #: checks (nodes that return and write nothing: ``_assert_tensor_metadata``) that pass on
    #: every call with this signature: what they check is known (not emitted)
    proven: set[Node] = field(default_factory=set)
    #: the code folds devices: its guard must check that input tensors are where the key
    #: says (``memory.cache.signature``: on the CPU unless it names a device)
    assumes_device: bool = False
    #: top-level nodes whose tensor the signature alone decides, for code that does not
    #: fold sizes (a shape program's): computed on the first call of the code's binding (one
    #: layout, so one signature) and kept for the next calls
    memo: set[Node] = field(default_factory=set)
    #: top-level views (``view``, ``transpose``...) of a managed value, or of such a view, by
    #: arguments the signature alone decides: where that value is an arena tensor of the
    #: code's layout, the view is the same on every call of the binding, and is kept too
    #: (taken again in a call whose arena write was refused)
    memo_views: set[Node] = field(default_factory=set)
