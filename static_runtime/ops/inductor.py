"""PyTorch's Inductor as a library: an aten-level FX graph → one compiled callable.

``compile_graph(gm, example_inputs)`` traces ``gm`` on the example inputs with Inductor's own
decompositions (``make_fx``; layer norm, softmax, GELU... become the primitives Inductor
fuses) and compiles the result with ``compile_fx_inner``, the step of ``torch.compile`` after
Dynamo and AOTAutograd: our graphs are already functional, aten-level and for inference, so
neither is needed. The result is the generated module's ``call(args)`` itself — the cheapest
way in (measured in ``benchmarks/fusion.py``: 3.0 µs for a five-operator pointwise region on
1 × 64 floats, against 5.3 µs through ``CompiledFxGraph.__call__`` and 5.0 µs through
``torch._inductor.compile``'s wrapper).

Compilation goes through Inductor's on-disk caches (``TORCHINDUCTOR_CACHE_DIR``, by default
``/tmp/torchinductor_$USER``): the FX graph cache keys the whole graph with its input
shapes, strides and dtypes, the C++ kernel cache each kernel's source; a second process
compiling the same region builds nothing. Nothing compiled is ever read from a file of ours.

A compiled callable is specialised to its inputs' shapes, strides and dtypes — the example
inputs' own strides, a slice's or an expanded tensor's too (the copies traced keep them). It
checks sizes and strides itself (``assert_size_stride``, an ``AssertionError``; every empty
tensor passes) but not dtypes. Its kernels also keep the OpenMP thread count torch had when they
were compiled, so a cache of compiled callables keys on ``torch.get_num_threads()`` too.
"""

from __future__ import annotations

import functools
import shutil
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch


class CompileRefused(RuntimeError):
    """Inductor did not compile the graph (no C++ compiler, an operator it refuses, ...)."""


@dataclass(frozen=True)
class Compiled:
    """A compiled graph: ``call([inputs...])`` → tuple of outputs. ``call`` empties the list
    it is given (Inductor frees its inputs as it goes): pass a new list every call."""

    call: Callable[[list], Any]
    #: the generated Python source (wrapper and C++ kernels), for ``describe`` and debugging
    source: str
    #: seconds spent tracing and compiling (a cache hit is a few tens of ms)
    seconds: float


_LOCK = threading.Lock()


@functools.cache
def compiler_available() -> str | None:
    """``None`` when Inductor can build C++ kernels here, else the reason it cannot."""
    try:
        from torch._inductor.cpp_builder import get_cpp_compiler

        compiler = get_cpp_compiler()
    except Exception as e:  # noqa: BLE001 — any failure means: no compiler
        return f"Inductor finds no C++ compiler ({type(e).__name__}: {e})"
    if shutil.which(compiler) is None and not _is_file(compiler):
        return f"Inductor's C++ compiler {compiler!r} is not on PATH"
    return None


def _is_file(path: str) -> bool:
    import os

    return os.path.isfile(path) and os.access(path, os.X_OK)


def compile_graph(fn: Callable[..., Any], example_inputs: Sequence[Any], *,
                  cpp_wrapper: bool = False) -> Compiled:
    """Compile ``fn`` (an FX ``GraphModule`` or any function of tensors that returns a tuple
    of tensors) for inputs like ``example_inputs``. Raises ``CompileRefused``.

    ``cpp_wrapper``: the wrapper that allocates buffers and calls the kernels is generated
    in C++ too (Inductor's ``cpp_wrapper`` mode), not Python — worth it for graphs of many
    small kernels and buffers (an unrolled recurrence), at the price of a longer compile."""
    import time

    reason = compiler_available()
    if reason is not None:
        raise CompileRefused(reason)
    start = time.perf_counter()
    # Inductor's compile state (its config patches, the fake mode it installs, the
    # graph-lowering context) is per process, not per thread.
    with _LOCK:
        try:
            from torch._guards import TracingContext, tracing
            from torch._inductor.compile_fx import compile_fx_inner
            from torch._inductor.decomposition import select_decomp_table
            from torch._subclasses.fake_tensor import FakeTensorMode
            from torch.fx.experimental.proxy_tensor import make_fx
            from torch.fx.experimental.symbolic_shapes import ShapeEnv

            with torch.inference_mode(False), torch.no_grad():
                inputs = [_copy_layout(x) if isinstance(x, torch.Tensor) else x
                          for x in example_inputs]
                traced = make_fx(fn, decomposition_table=select_decomp_table())(*inputs)
                # Inductor's FX graph cache keys shapes through the tracing context's
                # ShapeEnv and is bypassed without one ("No shape env"); it also hashes a
                # real tensor's values, so it is given fake ones
                fake_mode = FakeTensorMode(shape_env=ShapeEnv())
                fakes = [fake_mode.from_tensor(x, static_shapes=True)
                         if isinstance(x, torch.Tensor) else x for x in inputs]
                with tracing(TracingContext(fake_mode)):
                    if cpp_wrapper:
                        from torch._inductor import config
                        from torch._inductor.compile_fx import get_cpp_wrapper_config

                        with config.patch(get_cpp_wrapper_config()):
                            compiled = compile_fx_inner(traced, fakes, cpp_wrapper=True)
                    else:
                        compiled = compile_fx_inner(traced, fakes)
        except Exception as e:  # Inductor raises many kinds; all mean "no"
            raise CompileRefused(f"{type(e).__name__}: {_first_line(e)}") from e
    call = getattr(compiled, "current_callable", None)
    if call is None:
        raise CompileRefused("Inductor returned no callable (its result type changed)")
    source = getattr(compiled, "source_code", "") or ""
    return Compiled(call, source, time.perf_counter() - start)


def _copy_layout(x: torch.Tensor) -> torch.Tensor:
    """A copy of ``x`` (a normal tensor, not an inference one) with its sizes and strides.

    The compiled code asserts its inputs have the strides it was compiled for, so it must be
    compiled for those the real inputs have: ``clone()`` keeps the strides of a dense tensor
    only, and gives a slice (``x[..., :16]``) or an expanded tensor dense ones — code the
    real input then fails. So the memory ``x`` spans is copied whole and viewed as ``x`` is
    (overlaps of an expanded tensor included), at storage offset 0."""
    if x.numel() == 0:
        return torch.empty_strided(x.shape, x.stride(), dtype=x.dtype)
    span = 1 + sum((n - 1) * s for n, s in zip(x.shape, x.stride()))
    memory = x.detach().as_strided((span,), (1,)).clone()
    return memory.as_strided(x.shape, x.stride())


def _first_line(e: BaseException) -> str:
    text = str(e).strip()
    return text.splitlines()[0][:300] if text else ""
