"""The peers: the runtimes people use today, and ours, each made a ``Runner`` of a Python
model on one fixed tuple of inputs, in one process (``timing.py`` times them side by side).

Used by the demo, the ``bench`` command and ``benchmarks/``. The runners (``RUNNERS``):

==========================  ===================================================================
``eager``                   ``model(*inputs)`` under ``torch.inference_mode()``
``torchscript``             ``torch.jit.freeze(scripted)``, inference mode
``optimize_for_inference``  ``torch.jit.optimize_for_inference(scripted)`` (freezes, then
                            folds conv/BatchNorm, MKLDNN layouts), inference mode
``pytorch_static_runtime``  PyTorch's C++ Static Runtime, ``torch._C._jit_to_static_module``
                            of ``scripted``
``torch_compile``           ``torch.compile(model, backend=...)`` (inductor by default), called
                            under inference mode; ``details["compile_seconds"]`` is
                            ``torch.compile`` plus the first call, where compilation happens
``onnxruntime``             ONNX Runtime (CPU provider, all graph optimisations, the same
                            thread count) on a ``torch.onnx.export`` of the model: the first
                            of ``ONNX_EXPORTERS`` whose output equals eager's on the inputs
                            and on ``check_inputs``; each call converts the tensors to NumPy
                            and back (zero-copy), as a caller holding torch tensors must
``static_runtime``          ours: ``StaticModule(scripted).runtime()``
``static_runtime_fused``    ours with ``fusion_compiler="inductor"``
``static_runtime_untuned``  ours with the defaults before issue 19: ATen's kernels by fixed
                            rules, nothing timed (``kernel_choice="default"``), a conv net's
                            activations in eager's layout (``channels_last=False``)
==========================  ===================================================================

``scripted`` is ``torch.jit.script(model)``, or the TorchScript module the caller prepared
(a traced Hugging Face model, which cannot be scripted); ONNX's TorchScript-based exporter
exports it, the others ``model``.

A peer that cannot run the model is reported, not fatal: its ``Runner`` has a ``note`` (why)
and a ``fn`` that raises. A peer that runs but with reservations (an export that is lossy, a
graph break) lists them in ``caveats``.
"""

from __future__ import annotations

import time
import traceback
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

import static_runtime as sr
from static_runtime.compare.memory import _arena_bytes
from static_runtime.compare.onnx_peer import _make_onnxruntime
from static_runtime.compare.runner import Runner, _reason, _refused, _Setup

RUNNERS = ("eager", "torchscript", "optimize_for_inference", "pytorch_static_runtime",
           "torch_compile", "onnxruntime", "static_runtime", "static_runtime_fused",
           "static_runtime_untuned")
DEMO_RUNNERS = ("eager", "torchscript", "pytorch_static_runtime", "static_runtime")


def _script(model: torch.nn.Module) -> torch.jit.ScriptModule:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        return torch.jit.script(model)


def _in_inference_mode(fn: Callable[..., Any], inputs: tuple) -> Callable[[], Any]:
    def run():
        with torch.inference_mode():
            return fn(*inputs)

    return run


def _make_eager(s: _Setup) -> Callable[[], Any]:
    return _in_inference_mode(s.model, s.inputs)


def _make_torchscript(s: _Setup) -> Callable[[], Any]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        frozen = torch.jit.freeze(s.scripted)  # a frozen copy: s.scripted is left as it was
    return _in_inference_mode(frozen, s.inputs)


def _make_optimize_for_inference(s: _Setup) -> Callable[[], Any]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        optimized = torch.jit.optimize_for_inference(s.scripted)  # freezes a copy
    return _in_inference_mode(optimized, s.inputs)


def _make_pytorch_static_runtime(s: _Setup) -> Callable[[], Any]:
    sm = torch._C._jit_to_static_module(s.scripted._c)
    inputs = s.inputs
    return lambda: sm(*inputs)


def _make_static_runtime(s: _Setup, options: sr.StaticModuleOptions | None = None
                         ) -> Callable[[], Any]:
    mod = sr.StaticModule(s.scripted, options=options)
    s.details["module"] = mod
    rt = mod.runtime()
    inputs = s.inputs

    def warm_up() -> None:
        # Steady state at one shape is the signature's own code, which a hot signature gets
        # from a background thread (runtime/hot.py): make it hot and let the build finish,
        # so every timed sample runs it (after setup and the first call are measured).
        for _ in range(mod.options.specialize_after + 1):
            rt(*inputs)
        mod._codes.builder.wait()

    s.warm_up = warm_up
    return lambda: rt(*inputs)


def _make_static_runtime_fused(s: _Setup) -> Callable[[], Any]:
    """Ours with ``fusion_compiler="inductor"``; the factory makes the first call, so the
    regions' compilation is counted in setup, as torch.compile's is."""
    run = _make_static_runtime(s, sr.StaticModuleOptions(fusion_compiler="inductor"))
    run()
    s.details["regions"] = sum(n.kind == "static_runtime::fused_region"
                               for n in s.details["module"].graph.walk())
    return run


#: Ours with the defaults before issue 19 (the ``static_runtime_untuned`` peer, ``bench
#: --untuned``): every kernel by fixed rules, nothing timed, and a conv net's activations in
#: eager's layout (the default, ``static_runtime``, measures kernels and keeps them
#: channels-last).
UNTUNED = sr.StaticModuleOptions(kernel_choice="default", channels_last=False)


def _make_static_runtime_untuned(s: _Setup) -> Callable[[], Any]:
    return _make_static_runtime(s, UNTUNED)


def _make_torch_compile(s: _Setup) -> Callable[[], Any]:
    """Compiles in the factory (by making the first call), so that a failure of the
    default inductor configuration can be retried: inductor's pattern-matcher passes
    (attention fusion, for one) have been seen to fail on graphs eager runs; the retry turns
    them off and says so in the caveats."""
    s.details["backend"] = s.compile_backend
    try:
        return _compile(s, {})
    except Exception as e:
        if s.compile_backend != "inductor":
            raise
        where = _failing_inductor_pass(e)
        s.details["first_attempt_error"] = _reason(e)
        s.details["first_attempt_seconds"] = s.details.pop("compile_seconds", float("nan"))
        try:
            run = _compile(s, {"pattern_matcher": False})
        except Exception:  # noqa: BLE001  (the first failure is the one to report)
            raise e  # the retry's failure stays attached as __context__
        s.caveats.append(f"inductor failed{where}: {_reason(e)}; compiled again with "
                         "options={'pattern_matcher': False}")
        return run


def _compile(s: _Setup, options: dict[str, Any]) -> Callable[[], Any]:
    """``torch.compile`` plus the first call; ``details["compile_seconds"]`` is both."""
    import torch._dynamo

    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()
    start = time.perf_counter()
    compiled = torch.compile(s.model, backend=s.compile_backend, options=options or None)
    run = _in_inference_mode(compiled, s.inputs)
    try:
        run()
    finally:
        s.details["compile_seconds"] = time.perf_counter() - start
    breaks = torch._dynamo.utils.counters["graph_break"]
    if breaks:
        reason = next(iter(breaks)).splitlines()[0][:160]
        s.caveats.append(f"{sum(breaks.values())} graph break(s); first: {reason}")
    return run


def _failing_inductor_pass(e: BaseException) -> str:
    """' in fx_passes/<file>.py:<function>' for the innermost inductor graph pass in the
    traceback of ``e`` or its causes, or ''."""
    found = ""
    while e is not None:
        for frame in traceback.extract_tb(e.__traceback__):
            if "_inductor/fx_passes/" in frame.filename.replace("\\", "/"):
                found = f" in fx_passes/{Path(frame.filename).name}:{frame.name}"
        e = e.__cause__
    return found


_FACTORIES: dict[str, Callable[[_Setup], Callable[[], Any]]] = {
    "eager": _make_eager,
    "torchscript": _make_torchscript,
    "optimize_for_inference": _make_optimize_for_inference,
    "pytorch_static_runtime": _make_pytorch_static_runtime,
    "torch_compile": _make_torch_compile,
    "onnxruntime": _make_onnxruntime,
    "static_runtime": _make_static_runtime,
    "static_runtime_fused": _make_static_runtime_fused,
    "static_runtime_untuned": _make_static_runtime_untuned,
}


def make_runners(model: torch.nn.Module, inputs: tuple, *,
                 include: tuple[str, ...] = DEMO_RUNNERS,
                 check_inputs: list[tuple] | None = None,
                 compile_backend: str = "inductor",
                 scripted: torch.jit.ScriptModule | None = None) -> list[Runner]:
    """Runners for ``model`` on ``inputs``, in the order of ``include`` (names from
    ``RUNNERS``). A peer that cannot run the model is reported with a note instead of a
    runner function (``fn`` raises).

    ``check_inputs``: further input sets of the same shapes on which a peer whose fidelity
    is in doubt (an ONNX export, which may have traced one branch) is compared with eager.
    ``compile_backend``: the ``torch.compile`` backend.
    ``scripted``: the TorchScript module of ``model`` as its users make it (traced, for a
    model that cannot be scripted); default ``torch.jit.script(model)``. TorchScript, the
    C++ runtime and ours run it (each on its own frozen copy); eager runs ``model``.
    """
    unknown = [name for name in include if name not in _FACTORIES]
    if unknown:
        raise ValueError(f"unknown runner(s) {unknown}; choose from {list(RUNNERS)}")
    model = model.eval()
    scripted = _script(model) if scripted is None else scripted.eval()
    runners: list[Runner] = []
    for name in include:
        s = _Setup(model, inputs, scripted, list(check_inputs or []), compile_backend)
        try:
            start = time.perf_counter()
            fn = _FACTORIES[name](s)
            setup = time.perf_counter() - start
            start = time.perf_counter()
            fn()  # first call outside timing; also proves the peer can run the model
            first = time.perf_counter() - start
            if s.warm_up is not None:
                s.warm_up()
            runners.append(Runner(name, fn, setup, first_call_seconds=first,
                                  caveats=s.caveats, details=s.details,
                                  held_bytes=_arena_bytes(s.details.pop("module", None))))
        except Exception as e:  # noqa: BLE001  (a peer that cannot run the model is reported)
            reason = _reason(e)
            s.details["error"] = f"{type(e).__name__}: {str(e).strip()[:4000]}"
            runners.append(Runner(name, _refused(reason), float("nan"), note=reason,
                                  caveats=s.caveats, details=s.details))
    return runners
