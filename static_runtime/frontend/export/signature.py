"""The signature of an exported program: the pytree structure of its inputs and outputs, and
what it assumed of each input (``InputGuard``), so the runtime can take the user's nested
arguments, check them, and give back the user's structure."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.utils._pytree as pytree
from torch.export import ExportedProgram

from static_runtime.ir.graph import Signature


@dataclass(frozen=True)
class InputGuard:
    """What the program assumed of one flat user input (``torch.export``'s own input check,
    ``_check_input_constraints_for_graph``, as data).

    For a tensor, ``dims`` has one entry per dimension: an ``int`` for a size that was
    specialised, or the name of its symbol (two dimensions with one symbol must agree; the
    symbol's range is in ``ExportSignature.ranges``). For a non-tensor input that was
    specialised, ``value`` is the value it must have; a symbolic int has ``symbol``."""

    path: str
    is_tensor: bool
    dims: tuple[int | str, ...] = ()
    value: Any = None
    symbol: str | None = None
    specialised: bool = False


@dataclass
class ExportSignature(Signature):
    """The signature of an exported program: graph inputs are the flattened user inputs.

    ``in_spec`` is the pytree ``TreeSpec`` of ``(args, kwargs)`` as exported, ``out_spec``
    that of the outputs; ``guards`` and ``ranges`` say which inputs the program accepts."""

    in_spec: Any = None
    out_spec: Any = None
    guards: tuple[InputGuard, ...] = ()
    ranges: dict[str, tuple[int, float]] = field(default_factory=dict)

    @property
    def flat_positional(self) -> bool:
        """Whether the program takes plain positional leaves (no nesting, no keywords): the
        call's ``args`` are then the graph inputs themselves."""
        spec = self.in_spec
        if spec is None or spec.type is not tuple or spec.num_children != 2:
            return False
        args, kwargs = spec.children()
        return (args.type is tuple and all(c.is_leaf() for c in args.children())
                and kwargs.type is dict and kwargs.num_children == 0)

    @property
    def out_is_leaf(self) -> bool:
        return self.out_spec is None or self.out_spec.is_leaf()



def user_paths(ep: ExportedProgram) -> list[str]:
    """Where each flat user input sits in the call's ``(args, kwargs)``: ``args[0]['x']``."""
    spec = ep.call_spec.in_spec
    if spec is None:
        return []
    dummy = pytree.tree_unflatten([0] * spec.num_leaves, spec)
    return [_path_str(p) for p, _ in pytree.tree_flatten_with_path(dummy)[0]]


def _path_str(path) -> str:
    """``args[0]['x']`` for a pytree key path into ``(args, kwargs)``."""
    if not path:
        return "input"
    head = "args" if getattr(path[0], "idx", None) == 0 else "kwargs"
    return head + "".join(str(k) for k in path[1:])


def input_guard(path: str, val: Any) -> InputGuard:
    """What the program assumed of the user input at ``path``, traced as ``val``."""
    if isinstance(val, torch.Tensor):
        return InputGuard(path, True, tuple(_dim(d) for d in val.shape))
    if isinstance(val, torch.SymInt) and _is_symbol(val):
        return InputGuard(path, False, symbol=str(val.node.expr))
    if isinstance(val, torch.SymInt) and isinstance(_dim(val), int):
        return InputGuard(path, False, value=_dim(val), specialised=True)
    if isinstance(val, (bool, int, float, str)) or val is None:
        return InputGuard(path, False, value=val, specialised=True)
    return InputGuard(path, False)


def _dim(d: Any) -> int | str:
    """A traced size: its int, its symbol's name, or ``"?"`` (an expression of symbols,
    not checked). A size ``Dim.AUTO`` left a symbolic int that export then specialised (a
    model whose code fixes it: Funnel's pooling fixed its length) is a number: checked."""
    if isinstance(d, int):
        return d
    if _is_symbol(d):
        return str(d.node.expr)
    expr = getattr(getattr(d, "node", None), "expr", None)
    if getattr(expr, "is_number", False) and getattr(expr, "is_integer", False):
        return int(expr)
    return "?"


def _is_symbol(d: Any) -> bool:
    return isinstance(d, torch.SymInt) and getattr(d.node.expr, "is_Symbol", False)


def ranges_of(ep: ExportedProgram) -> dict[str, tuple[int, float]]:
    """Each symbol's range, ``(lower, upper)``; an unbounded end is 0 or ``math.inf``."""
    out = {}
    for sym, vr in ep.range_constraints.items():
        out[str(sym)] = (_bound(vr.lower, 0), _bound(vr.upper, math.inf))
    return out


def _bound(x: Any, unbounded: float) -> float:
    """A range bound as a number (``int_oo``/``oo``, which ``int()`` refuses, unbounded)."""
    try:
        return int(x)
    except (TypeError, ValueError, OverflowError, AttributeError):
        return unbounded

