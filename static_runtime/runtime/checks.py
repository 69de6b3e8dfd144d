"""Out variants proven, not trusted: each is checked against its functional form before the
arena path serves it.

An out variant (``ops/out_variants.py``) is mostly *derived*: ATen's ``.out`` overload of the
node's operator. ATen's out kernels are separate code from the functional ones and can be
wrong where the functional form is right — ``fft_ihfftn.out`` over one dimension leaves
``out`` untouched, so every call after the first returned whatever the arena held. Such a
bug is silent: the first call of a signature allocates (and is right), the arena serves the
rest. So before a node's out variant writes an arena tensor, it is run once beside the
functional form on the same arguments:

* into a *poisoned* tensor — every element set to a value that differs from the functional
  result there (NaN, or 0 where the result is NaN; the other bool; the low bit flipped) — so
  an element the out variant does not write cannot pass;
* then compared with the functional result: same shape and dtype, values equal within
  ``torch.testing.assert_close``'s tolerance, NaNs equal.

A check runs per node and per *argument key* — each tensor argument's dtype, rank and
whether it is contiguous, each other argument's type — on the first call that needs it: the
call that records a new input signature (the out variant writes a scratch tensor laid out as
the arena's would be), or, for a layout planned without such a call (``example_inputs``: a
meta-tensor run), that layout's first real call (then into the arena tensor itself). A new
size alone checks nothing again. A node whose out variant disagrees, or raises where the
functional form does not, runs functionally from then on, in every layout: an
``OutVariantWarning`` says so once, and ``describe()`` shows it. Random operators
(``nondeterministic_seeded``) are checked with the generators' state put back before the
second run, so both draw the same numbers and the model's random stream advances once.
"""

from __future__ import annotations

import contextlib
import math
import threading
import warnings
import weakref
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch

from static_runtime.ir import schema as S
from static_runtime.memory.arena import TensorSpec, materialize, observe
from static_runtime.memory.planner import DEFAULT_ALIGNMENT
from static_runtime.ops.registry import may_hand_back
from static_runtime.runtime.plan import ProcessedNode


class OutVariantWarning(UserWarning):
    """A node's out variant disagreed with its functional form; it runs functionally."""


@dataclass(frozen=True)
class Refusal:
    """Why a node's out variant is not used."""

    where: str
    label: str
    arguments: str
    reason: str

    def __str__(self) -> str:
        return (f"{self.where}: its out variant ({self.label}) disagreed with the functional "
                f"form for arguments {self.arguments}: {self.reason}")


class OutVariantChecks:
    """The checks' verdicts for one module, shared by its runtimes (thread-safe)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        #: (node, argument key) → None (agreed) or the reason it disagreed
        self._verdicts: dict[tuple[Any, tuple], str | None] = {}
        #: managed slot → why its node runs functionally
        self.refused: dict[int, Refusal] = {}
        self._random: dict[Any, bool] = {}
        #: layouts planned without a recording run whose first real call checked them
        self._checked_layouts: dict[int, weakref.ref] = {}
        self._managed_nodes: list[tuple[ProcessedNode, bool]] | None = None

    # -- what is still to check

    @property
    def refused_slots(self) -> frozenset[int]:
        return frozenset(self.refused)

    def layout_checked(self, layout: Any) -> bool:
        """Whether ``layout`` needs no checking call: it was planned from a recording run
        (which checked every node it placed) or a checking call has run on it."""
        if getattr(layout, "checked", True):
            return True
        ref = self._checked_layouts.get(id(layout))
        return ref is not None and ref() is layout

    def mark_checked(self, layout: Any) -> None:
        with self._lock:
            self._checked_layouts[id(layout)] = weakref.ref(layout)

    def all_checked(self, plan: Any, values: list[Any], only: set[int] | None = None) -> bool:
        """After a call that stored every value into ``values`` without checking (a
        recording through generated code): whether each managed node it ran met arguments
        its out variant was checked for. Nodes inside loops may have met others on earlier
        iterations than the last one ``values`` holds: those count as unchecked. ``only``:
        the managed slots the arena will hold (the others' out variants never run)."""
        if self._managed_nodes is None:
            self._managed_nodes = _managed_nodes(plan)
        for pn, in_loop in self._managed_nodes:
            if values[pn.outputs[0]] is None or (only is not None and pn.outputs[0] not in only):
                continue  # not run (a branch not taken), or not in the arena
            if in_loop or self.pending(pn, [values[i] for i in pn.inputs]) is not None:
                return False
        return True

    def pending(self, pn: ProcessedNode, args: list[Any]) -> tuple | None:
        """The argument key still to check for this node, or None."""
        key = argument_key(args)
        return None if (pn.node, key) in self._verdicts else key

    # -- checking

    def recorded(self, pn: ProcessedNode, args: list[Any]) -> Any:
        """Run ``pn`` functionally (a recording call) and, if its arguments' key is new,
        check its out variant into a scratch tensor laid out as the arena's would be.
        Returns the functional result."""
        key = self.pending(pn, args)
        if key is None or pn.outputs[0] in self.refused:
            return pn.fn(*args)
        draws = _Draws(self._generators(pn, args))
        expected = pn.fn(*args)
        obs = observe(expected, ())
        if obs is None or not obs.fits or expected.device.type != "cpu":
            # not something the arena would hold (or a meta-tensor run planning ahead)
            return expected
        out, _buffer = _scratch(expected, obs.strides)
        with draws.again():
            problem, _ = _compare_out(pn, args, expected, out, scratch=True)
        self._verdict(pn, key, args, problem)
        return expected

    def verify(self, pn: ProcessedNode, args: list[Any], out: torch.Tensor
               ) -> tuple[Any, bool]:
        """A layout's first real call: run ``pn``'s out variant into its arena tensor
        ``out``, checked against the functional form if its key is new.
        Returns ``(result, in_arena)``; ``in_arena`` False: the value is allocated from now
        on (refused, or its size outgrew the arena tensor)."""
        key = self.pending(pn, args)
        if key is None:
            try:
                result = pn.out_fn(out, *args)
            except RuntimeError as e:
                if not _refused_resize(e):
                    raise
                return pn.fn(*args), False
            return (result if _handed_back(pn, out, result) else out), True
        draws = _Draws(self._generators(pn, args))
        expected = pn.fn(*args)
        try:
            with draws.again():
                problem, written = _compare_out(pn, args, expected, out, scratch=False)
        except _OutgrewArena:
            return expected, False
        self._verdict(pn, key, args, problem)
        return (expected, False) if problem is not None else (written, True)

    def _verdict(self, pn: ProcessedNode, key: tuple, args: list[Any],
                 problem: str | None) -> None:
        refusal = None
        with self._lock:
            self._verdicts[(pn.node, key)] = problem
            if problem is not None and pn.outputs[0] not in self.refused:
                refusal = Refusal(pn.where(), pn.impl.label, describe_arguments(args), problem)
                self.refused[pn.outputs[0]] = refusal
        if refusal is not None:
            warnings.warn(f"{refusal}; it runs functionally from now on", OutVariantWarning,
                          stacklevel=2)

    def _generators(self, pn: ProcessedNode, args: list[Any]) -> list[torch.Generator]:
        """The generators a random operator draws from: its generator arguments, else the
        default CPU generator. Empty for other operators."""
        node = pn.node
        random = self._random.get(node)
        if random is None:
            op = S.resolve_overload(node.schema) if node.schema else None
            random = op is not None and torch.Tag.nondeterministic_seeded in op.tags
            self._random[node] = random
        if not random:
            return []
        given = [a for a in args if isinstance(a, torch.Generator)]
        return given or [torch.default_generator]


class _Draws:
    """The random generators' states when made; ``again()`` runs its body from those states
    (the same draws as the functional form's) and leaves them as the functional form did,
    so the model's random stream advances once."""

    def __init__(self, generators: list[torch.Generator]):
        self._generators = generators
        self._before = [g.get_state() for g in generators]

    @contextlib.contextmanager
    def again(self) -> Iterator[None]:
        after = [g.get_state() for g in self._generators]
        for g, state in zip(self._generators, self._before):
            g.set_state(state)
        try:
            yield
        finally:
            for g, state in zip(self._generators, after):
                g.set_state(state)


class _OutgrewArena(Exception):
    """PyTorch refused to grow the arena tensor: a size the layout did not plan for."""


def _refused_resize(e: BaseException) -> bool:
    return "not resizable" in str(e)


def _compare_out(pn: ProcessedNode, args: list[Any], expected: Any, out: torch.Tensor, *,
                 scratch: bool) -> tuple[str | None, Any]:
    """Poison ``out``, run the out variant into it, compare with ``expected``: ``(None if
    they agree, else what differs; the tensor holding the out variant's result — ``out``, or
    the one it handed back, ``registry.hands_back``)``."""
    if not isinstance(expected, torch.Tensor):
        return f"the functional form returned a {type(expected).__name__}, not a tensor", out
    if out.shape == expected.shape and out.dtype == expected.dtype:
        poison = _poison(_comparable(expected))
        if poison is not None:
            out.copy_(poison)  # (cast back for dtypes compared through a wider one)
    try:
        result = pn.out_fn(out, *args)
    except Exception as e:  # what it raised is the verdict
        if not scratch and isinstance(e, RuntimeError) and _refused_resize(e):
            raise _OutgrewArena from e
        first = str(e).strip().splitlines()[0] if str(e).strip() else ""
        return f"it raised {type(e).__name__}: {first[:200]}", out
    written = result if _handed_back(pn, out, result) else out
    if written.shape != expected.shape or written.dtype != expected.dtype:
        return (f"it wrote {_tensor_str(written)} where the functional form returns "
                f"{_tensor_str(expected)}"), written
    got, expected = _comparable(written), _comparable(expected)
    if torch.equal(got, expected):
        return None, written
    try:
        torch.testing.assert_close(got, expected, equal_nan=True, check_stride=False)
    except AssertionError:
        return _difference(got, expected), written
    return None, written


def _handed_back(pn: ProcessedNode, out: torch.Tensor, result: Any) -> bool:
    """Whether the out variant handed back a result of its own (``registry.hands_back``)."""
    return result is not out and isinstance(result, torch.Tensor) and may_hand_back(pn.out_fn)


#: Dtypes PyTorch's CPU kernels cannot compare (``equal``, ``isnan``): compared as these.
_WIDER = {torch.complex32: torch.complex64, torch.float8_e4m3fn: torch.float32,
          torch.float8_e5m2: torch.float32, torch.float8_e4m3fnuz: torch.float32,
          torch.float8_e5m2fnuz: torch.float32}


def _comparable(t: torch.Tensor) -> torch.Tensor:
    wider = _WIDER.get(t.dtype)
    return t if wider is None else t.to(wider)


def _difference(out: torch.Tensor, expected: torch.Tensor) -> str:
    """How ``out`` differs from ``expected`` (same shape and dtype), in a few words."""
    same = _equal_elements(out, expected)
    differ = int((~same).sum())
    text = f"{differ} of {out.numel()} elements differ"
    poison = _poison(expected)
    if poison is not None:
        unwritten = int((_equal_elements(out, poison) & ~same).sum())
        if unwritten:
            text += f", {unwritten} of them never written"
    if out.dtype.is_floating_point or out.dtype.is_complex:
        gap = (out - expected).abs()[~same]
        finite = gap[torch.isfinite(gap)]
        if finite.numel():
            text += f" (greatest difference {float(finite.max()):.3g})"
    return text


def _equal_elements(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    if a.dtype.is_floating_point or a.dtype.is_complex:
        return (a == b) | (torch.isnan(a) & torch.isnan(b))
    return a == b


def _poison(expected: torch.Tensor) -> torch.Tensor | None:
    """A tensor that differs from ``expected`` in every element (None: no such rule for its
    dtype)."""
    dtype = expected.dtype
    if dtype.is_floating_point or dtype.is_complex:
        nan = torch.full_like(expected, math.nan)
        return torch.where(torch.isnan(expected), torch.zeros_like(expected), nan)
    if dtype is torch.bool:
        return ~expected
    if not expected.is_quantized and dtype in _INTEGERS:
        return expected ^ 1
    return None


_INTEGERS = frozenset({torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64,
                       torch.uint16, torch.uint32, torch.uint64})


def _scratch(like: torch.Tensor, strides: tuple[int, ...] | None
             ) -> tuple[torch.Tensor, torch.Tensor]:
    """A tensor over memory of its own that cannot grow, laid out as the arena lays out a
    value observed as ``like``; and the buffer that backs it (keep it alive)."""
    nbytes = like.numel() * like.element_size()
    buffer = torch.empty(nbytes + DEFAULT_ALIGNMENT, dtype=torch.uint8)
    spec = TensorSpec(0, "scratch", like.dtype, tuple(like.shape), 0, nbytes, strides)
    return materialize([spec], buffer)[0], buffer


def argument_key(args: list[Any]) -> tuple:
    """What a check holds for: each tensor's dtype, rank and contiguity, each other
    argument's type (lists and tuples element by element)."""
    return tuple(_key(a) for a in args)


def _key(a: Any) -> Any:
    if isinstance(a, torch.Tensor):
        return (a.dtype, a.dim(), a.is_contiguous())
    if isinstance(a, (list, tuple)):
        return (type(a), tuple(_key(e) for e in a))
    return type(a)


def describe_arguments(args: list[Any]) -> str:
    return "(" + ", ".join(_describe(a) for a in args) + ")"


def _describe(a: Any) -> str:
    if isinstance(a, torch.Tensor):
        return _tensor_str(a)
    if isinstance(a, (list, tuple)) and len(a) <= 8:
        inner = ", ".join(_describe(e) for e in a)
        return f"[{inner}]" if isinstance(a, list) else f"({inner})"
    text = repr(a)
    return text if len(text) <= 40 else type(a).__name__


def _tensor_str(t: torch.Tensor) -> str:
    dtype = str(t.dtype).removeprefix("torch.")
    return f"{dtype}{list(t.shape)}"


def _managed_nodes(plan: Any) -> list[tuple[ProcessedNode, bool]]:
    """The plan's managed nodes, each with whether it sits inside a loop."""
    found: list[tuple[ProcessedNode, bool]] = []

    def walk(block: Any, in_loop: bool) -> None:
        for pn in block.nodes:
            if pn.managed:
                found.append((pn, in_loop))
            for sub in pn.blocks:
                walk(sub, in_loop or pn.kind == "prim::Loop")

    walk(plan.block, False)
    return found
