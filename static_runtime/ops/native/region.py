"""``static_runtime::fused_region``: a region of small operators (``passes/regions.py``) run
as kernels Inductor compiled (``ops/inductor.py``).

A region is compiled the first time it runs with a given *signature* — its tensors' shapes,
strides and dtypes, its numbers' types, and torch's intra-op thread count (Inductor's kernels
run as many OpenMP threads as there were when they were compiled) — and the compiled code is
kept per signature.
A call tries the last compiled code first: it checks sizes and strides itself (an
``AssertionError`` from ``assert_size_stride``, for the inputs its kernels read as tensors)
and we check dtypes, ranks (a 0-dim input is read as a number, unchecked) and that no tensor is
empty (``assert_size_stride`` passes every empty tensor) or lazily conjugated or negated
(those are materialised first: the compiled code ignores the bits), so a steady state pays
almost nothing for the lookup. Empty tensors run the operators unfused. Numbers known only at run time reach the compiled code as 0-dim
tensors (int64, float64 or bool); in the traced graph each use is the operator's
tensor-taking overload (``mul.Scalar`` → ``mul.Tensor``), with a float cast to the default
dtype where every tensor operand is integral, which is the dtype ``tensor * 0.5`` has — so
the result dtypes are those of the unfused graph.

Compiled code writes fresh tensors (Inductor allocates its outputs); a region's results
are not planned into the arena. A result that shares memory with an input, or two results
that share memory, would break the alias analysis's model of the node (fresh results):
the first run of each signature checks that, and a region whose compiled code does it runs
unfused.

A new signature runs the operators unfused once before it is compiled, so that arguments
they refuse raise the operator's own error, with a note naming it; then the compiled code
runs on the same arguments and serves only if it returns what they did (``assert_close``).

The option never raises where the operators would not:
when Inductor refuses a signature (no C++ compiler, an operator it cannot lower), when the
region computes float16/bfloat16 tensors (Inductor computes those in float32 and rounds
once, the operators round after each one: results differ by more than ``assert_close``
allows), when the compiled code raises or returns other results on its first run, or
raises on a later call where the operators, run on the same arguments, do not, a
``RegionWarning`` names the region, the signature and the reason, and that signature runs
the region's operators one by one (``torch.ops``) from then on. Where the operators raise
too, the arguments are at fault, and the operators' error propagates.
"""

from __future__ import annotations

import functools
import threading
import warnings
from typing import Any

import torch

from static_runtime.ir import schema as S
from static_runtime.ir import types as T
from static_runtime.ir.graph import SUBGRAPH, Graph, Node
from static_runtime.ops.inductor import CompileRefused, compile_graph
from static_runtime.ops.registry import register_native

_NUMBERS = (T.Int, T.Float, T.Bool, T.Number)
_SCALAR_DTYPE = {bool: torch.bool, int: torch.int64, float: torch.float64}
_REDUCED = (torch.float16, torch.bfloat16)
_threads = torch.get_num_threads
#: How many run-time numbers' 0-dim tensors a region keeps (then it starts again).
_MAX_KEPT_SCALARS = 1024


class RegionWarning(UserWarning):
    """A region that runs unfused, and why."""


class RegionKernel:
    """Runs one fused region; shared by every runtime of the module (thread-safe)."""

    def __init__(self, graph: Graph, name: str):
        self.graph = graph
        self.name = name
        self.numbers = tuple(i for i, v in enumerate(graph.inputs) if v.type in _NUMBERS)
        self._kernels: dict[tuple, Any] = {}  # signature → compiled call, or None (unfused)
        #: (threads, (position, dtype, rank) of each tensor, call) of the signature compiled last
        self._last: tuple[tuple, Any] | None = None
        self._scalars: dict[tuple, torch.Tensor] = {}
        self._lock = threading.Lock()
        self.refusals: dict[tuple, str] = {}
        self.compile_seconds = 0.0
        self.__sr_label__ = "Inductor-compiled fused kernels"
        self._annotated = self.trace_function(annotate=True)

    # -- the call

    def __call__(self, *args: Any) -> Any:
        args = list(args)
        if self.numbers:
            scalars = self._scalars
            for i in self.numbers:
                x = args[i]
                t = scalars.get((type(x), x))
                args[i] = t if t is not None else self._scalar(x)
        last = self._last
        if last is not None and last[0] == _threads():
            _, dtypes, call = last
            for i, d, rank in dtypes:
                a = args[i]
                # (assert_size_stride passes any empty tensor: those never take this path;
                # nor do tensors with a conjugate or negative bit, see _resolved. Inductor
                # asserts sizes and strides only of the inputs its kernels read as tensors,
                # and reads a 0-dim one as a number: the rank is checked here, and a 0-dim
                # tensor has no size or stride to differ in.)
                if a.dtype is not d or a.dim() != rank or not a.numel() or a.is_neg() or \
                        (d.is_complex and a.is_conj()):
                    break
            else:
                try:
                    out = call(args[:])  # call() empties the list it gets
                except Exception:  # noqa: BLE001, S110
                    pass  # sizes or strides not those compiled for, or the code failing: _run
                else:
                    return out[0] if len(out) == 1 else out
        out = self._run(_resolved(args))
        return out[0] if len(out) == 1 else out

    def _run(self, args: list) -> tuple:
        key, call = self._for_signature(args)
        if call is self._unfused:
            return call(args)
        try:
            return call(args[:])
        except Exception as e:  # noqa: BLE001 — the operators decide whose error it is
            error = e
        # The signature's code ran once before (when compiled) on these sizes, strides and
        # dtypes. If the operators raise too, the arguments are at fault: their error, with
        # its note, propagates from here. If not, the compiled code is, and it serves no more.
        out = self._unfused(args)
        self._demote(key, call, f"the compiled code raised {_error(error)}")
        return out

    def _scalar(self, x: Any) -> torch.Tensor:
        """A number read at run time as the 0-dim tensor the compiled code takes; kept (the
        code only reads it), so a loop counter's values are made once."""
        t = torch.scalar_tensor(x, dtype=_SCALAR_DTYPE[type(x)])
        if len(self._scalars) >= _MAX_KEPT_SCALARS:
            self._scalars.clear()
        self._scalars[(type(x), x)] = t
        return t

    def _for_signature(self, args: list) -> tuple[tuple | None, Any]:
        """The signature of ``args`` and its compiled call, compiling it the first time; or
        the unfused operators, for a signature Inductor refused, and for empty tensors."""
        if any(isinstance(a, torch.Tensor) and a.numel() == 0 for a in args):
            return None, self._unfused  # nothing to gain, and Inductor's kernels are not for it
        # Inductor's kernels run as many OpenMP threads as torch had when they were compiled
        threads = _threads()
        key = (threads,) + tuple((tuple(a.shape), a.stride(), a.dtype)
                                 if isinstance(a, torch.Tensor) else type(a) for a in args)
        with self._lock:
            if key not in self._kernels:
                # The operators first, as they would run: arguments they refuse (shapes
                # that do not broadcast...) raise their own error here, naming the
                # operator, and nothing is compiled or remembered for them.
                dtypes: list[torch.dtype] = []
                expected = self._observed(dtypes.append)(*args)
                self._kernels[key] = self._compile(key, args, dtypes, expected)
            call = self._kernels[key]
            if call is None:
                return key, self._unfused
            self._last = (threads, tuple((i, a.dtype, a.dim()) for i, a in enumerate(args)
                                         if isinstance(a, torch.Tensor)), call)
        return key, call

    def _compile(self, key: tuple, args: list, dtypes: list[torch.dtype],
                 expected: tuple) -> Any:
        """``dtypes``: those of every result of the region's operators, seen running them on
        ``args``; ``expected``: the region's results they computed. The compiled code runs
        once on ``args`` and serves only if it neither raises nor returns other results."""
        reduced = next((d for d in dtypes if d in _REDUCED), None)
        if reduced is not None:
            self._refuse(key, f"a {reduced} tensor: Inductor computes in float32 and rounds "
                              "once, where the operators round after each one")
            return None
        try:
            compiled = compile_graph(self.trace_function(), args)
        except CompileRefused as e:
            self._refuse(key, str(e))
            return None
        self.compile_seconds += compiled.seconds
        try:
            out = compiled.call(list(args))
        except Exception as e:  # noqa: BLE001 — the operators ran on these arguments
            self._refuse(key, f"the compiled code raised {_error(e)}")
            return None
        reason = _aliasing(args, out) or _differs(out, expected)
        if reason is not None:
            self._refuse(key, reason)
            return None
        return compiled.call

    def _refuse(self, key: tuple, reason: str) -> None:
        self.refusals[key] = reason
        warnings.warn(f"fused region {self.name} runs unfused for inputs {_show(key)}: "
                      f"{reason}", RegionWarning, stacklevel=4)

    def _demote(self, key: tuple, call: Any, reason: str) -> None:
        """The signature ``key``, compiled as ``call``, runs unfused from now on."""
        with self._lock:
            if self._kernels.get(key) is not call:
                return  # another thread did it
            self._kernels[key] = None
            if self._last is not None and self._last[2] is call:
                self._last = None
            self._refuse(key, reason)

    def _unfused(self, args: list) -> tuple:
        return self._annotated(*args)

    def _observed(self, observe: Any):
        return self.trace_function(annotate=True, observe=observe)

    # -- the region as a function of tensors, for make_fx

    @functools.cached_property
    def _steps(self) -> list[tuple]:
        """For each operator: the node, its ``torch.ops`` overload (the tensor-taking one
        where numbers come in as 0-dim tensors), those positions, and which arguments are
        keyword-only (their names)."""
        graph, steps = self.graph, []
        for node in graph.block.nodes:
            if node.kind == "prim::Constant":
                continue
            numbers = frozenset(i for i, v in enumerate(node.inputs)
                                if v in graph.inputs and v.type in _NUMBERS)
            schema = S.scalar_as_tensor_overload(node.schema, numbers) if numbers else \
                node.schema
            keywords = tuple(a.name if a.kwarg_only else None for a in S.parse(schema).arguments)
            steps.append((node, S.resolve_overload(schema), numbers, keywords))
        return steps

    def trace_function(self, *, annotate: bool = False, observe: Any = None):
        """The region's operators as a Python function of its inputs (numbers as 0-dim
        tensors), calling each operator's ``torch.ops`` overload: what ``make_fx`` traces,
        and the unfused path. With ``annotate``, an error raised by one of them gets a note
        naming it (kind and source line); ``observe`` sees each result's dtype."""
        graph, steps = self.graph, self._steps
        constants = {n.output: n.attrs.get("value") for n in graph.block.nodes
                     if n.kind == "prim::Constant"}
        default = torch.get_default_dtype()

        def run(*inputs):
            env: dict = dict(constants)
            env.update(zip(graph.inputs, inputs))
            for node, op, numbers, keywords in steps:
                args = [env[v] for v in node.inputs]
                if numbers:  # a float with only integral tensors: the default dtype's
                    floating = any(isinstance(a, torch.Tensor) and a.is_floating_point()
                                   for i, a in enumerate(args) if i not in numbers)
                    for i in numbers:
                        if args[i].is_floating_point() and not floating:
                            args[i] = args[i].to(default)
                try:
                    result = op(*[a for a, k in zip(args, keywords) if k is None],
                                **{k: a for a, k in zip(args, keywords) if k is not None})
                except Exception as e:
                    if annotate:
                        where = f" at {node.source}" if node.source else ""
                        note = (f"static_runtime: while running {node.kind}{where} in fused "
                                f"region {self.name}")
                        e.__notes__ = [*getattr(e, "__notes__", ()), note]  # (3.10: no add_note)
                    raise
                outs = node.outputs
                if observe is not None:
                    for t in (result if isinstance(result, (tuple, list)) else (result,)):
                        observe(t.dtype)
                if len(outs) == 1:
                    env[outs[0]] = result
                else:
                    env.update(zip(outs, result))
            return tuple(env[v] for v in graph.outputs)

        return run

    def meta(self, *args: Any) -> Any:
        """The region on meta tensors (numbers as given): the shapes and dtypes of its
        results, for the specializer; compiles nothing."""
        args = [torch.empty((), dtype=_SCALAR_DTYPE[type(a)], device="meta")
                if i in self.numbers else a for i, a in enumerate(args)]
        out = self.trace_function()(*args)
        return out[0] if len(out) == 1 else out

    # -- describe

    def status(self) -> str:
        compiled = sum(1 for k in self._kernels.values() if k is not None)
        text = f"{self.name}: compiled for {compiled} signature(s)"
        if self.refusals:
            text += f", unfused for {len(self.refusals)} ({next(iter(self.refusals.values()))})"
        return text


def _resolved(args: list) -> list:
    """``args`` with every lazily conjugated or negated tensor (``x.conj()``, the ``imag`` of
    one) materialised. Inductor's code reads a tensor's memory as it is and ignores those
    bits: a conjugate one makes it raise (``view_as_real``), a negated one gives the wrong
    sign."""
    if not any(isinstance(a, torch.Tensor) and (a.is_conj() or a.is_neg()) for a in args):
        return args
    return [a.resolve_conj().resolve_neg() if isinstance(a, torch.Tensor) else a for a in args]


def _aliasing(args: tuple, out: tuple) -> str | None:
    seen = {}
    for i, a in enumerate(args):
        if isinstance(a, torch.Tensor):
            seen.setdefault(a.untyped_storage().data_ptr(), f"input {i}")
    for j, o in enumerate(out):
        ptr = o.untyped_storage().data_ptr()
        if ptr in seen and o.numel() > 0:
            return f"the compiled code returns result {j} in the memory of {seen[ptr]}"
        seen[ptr] = f"result {j}"
    return None


def _differs(out: tuple, expected: tuple) -> str | None:
    """Why the compiled code's results are not the operators' (``assert_close``), or None."""
    for j, (o, e) in enumerate(zip(out, expected)):
        try:
            torch.testing.assert_close(o, e, equal_nan=True)
        except AssertionError as err:
            lines = [x.strip() for x in str(err).splitlines() if x.strip()]
            detail = "; ".join(x for x in lines if x.startswith(("Greatest", "The values")))
            return f"result {j} is not the operators' ({detail or lines[0]})"
    if len(out) != len(expected):
        return f"the compiled code returns {len(out)} results, the operators {len(expected)}"
    return None


def _error(e: BaseException) -> str:
    lines = [x for x in str(e).splitlines() if x.strip()]
    return f"{type(e).__name__}: {' '.join(lines[:2])[:300]}" if lines else type(e).__name__


def _show(key: tuple) -> str:
    """The signature as dtypes and shapes, with the strides of tensors not contiguous."""
    key = key[1:]  # the thread count
    return "(" + ", ".join(_show_one(k) for k in key) + ")"


def _show_one(k: Any) -> str:
    if not isinstance(k, tuple):
        return k.__name__
    shape, stride, dtype = k
    text = f"{str(dtype).removeprefix('torch.')}{list(shape)}"
    dense = torch.empty(shape, device="meta").stride()
    if any(n > 1 and s != d for n, s, d in zip(shape, stride, dense)):
        text += f" strides {tuple(stride)}"
    return text


@register_native("static_runtime::fused_region")
def _fused_region(node: Node):
    graph = node.attrs.get(SUBGRAPH)
    if not isinstance(graph, Graph):
        return None
    names = ", ".join(f"%{v.name}" for v in node.outputs)
    return RegionKernel(graph, f"{names} ({node.attrs.get('kernels', '?')} kernels)")
