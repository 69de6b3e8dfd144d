"""Runners for a model file, as the ``bench`` command compares them: a TorchScript archive
(``.pt``) or a ``torch.export`` archive (``.pt2``), each with one fixed tuple of inputs.

==========================  =================================================================
``.pt``                     the TorchScript interpreter on ``torch.jit.load(path)`` (the
                            reference), the same frozen, PyTorch's C++ Static Runtime, ONNX
                            Runtime on the archive exported by ONNX's TorchScript-based
                            exporter, ``torch.compile`` (which refuses TorchScript modules: the
                            row says so), ours
``.pt2``                    eager PyTorch on ``torch.export.load(path).module()`` (the
                            reference), ONNX Runtime on the program exported by the
                            ``torch.export``-based exporter, ``torch.compile`` of the
                            program's module (inductor), ours
==========================  =================================================================

ONNX Runtime and ``torch.compile`` are set up as ``peers.py`` sets them up for a Python
model (its docstring): the same session options and thread count, the same compile
and retry. A peer that cannot run the model — onnxruntime not installed, an export that
fails — is a ``Runner`` with a one-line ``note``, never an exception.
"""

from __future__ import annotations

import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

import static_runtime as sr
from static_runtime.compare.memory import _arena_bytes
from static_runtime.compare.onnx_peer import _make_onnxruntime
from static_runtime.compare.peers import UNTUNED, _in_inference_mode, _make_torch_compile
from static_runtime.compare.runner import Runner, _reason, _refused, _Setup

ARCHIVE_RUNNERS = ("torchscript", "torchscript_frozen", "pytorch_static_runtime",
                   "onnxruntime", "torch_compile", "static_runtime")
EXPORTED_RUNNERS = ("eager", "onnxruntime", "torch_compile", "static_runtime")

#: A factory builds a runner's function; it may record, in the ``_Setup`` it is given, the
#: caveats and details of its peer and how to read the bytes it holds (``held``).
Factory = Callable[[_Setup], Callable[[], Any]]


def make_archive_runners(path: str | Path, inputs: tuple, *,
                         module: sr.StaticModule | None = None,
                         untuned: bool = False) -> list[Runner]:
    """Runners for a TorchScript archive (``ARCHIVE_RUNNERS``; eager PyTorch is not
    available: the archive holds no Python code). Ours is ``module`` if given, else
    ``StaticModule(path)``; with ``untuned``, also ours with ``UNTUNED``
    (``static_runtime_untuned``)."""
    path = str(path)

    def loaded() -> torch.jit.ScriptModule:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            return torch.jit.load(path, map_location="cpu").eval()

    def make_torchscript(s: _Setup) -> Callable[[], Any]:
        return _in_inference_mode(s.model, inputs)

    def make_frozen(s: _Setup) -> Callable[[], Any]:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            return _in_inference_mode(torch.jit.freeze(s.scripted), inputs)

    def make_cpp(s: _Setup) -> Callable[[], Any]:
        sm = torch._C._jit_to_static_module(s.scripted._c)
        return lambda: sm(*inputs)

    def setup() -> _Setup:
        m = loaded()
        # the scripted module is exported as it is (ONNX's TorchScript-based exporter); the
        # torch.export-based one cannot trace a TorchScript module
        return _Setup(m, inputs, m, [], "inductor", exporters=("torchscript_scripted",))

    return _runners_from({"torchscript": make_torchscript, "torchscript_frozen": make_frozen,
                          "pytorch_static_runtime": make_cpp,
                          "onnxruntime": _make_onnxruntime, "torch_compile": _make_torch_compile,
                          **_ours(path, inputs, module, untuned)}, setup)


def make_exported_runners(path: str | Path, inputs: tuple, *,
                          module: sr.StaticModule | None = None,
                          untuned: bool = False) -> list[Runner]:
    """Runners for a ``torch.export.save`` archive (``.pt2``; ``EXPORTED_RUNNERS``).
    TorchScript and PyTorch's C++ Static Runtime cannot run an exported program. Ours is
    ``module`` if given, else ``StaticModule(path)``; with ``untuned``, also ours with
    ``UNTUNED``."""
    path = str(path)

    def make_eager(s: _Setup) -> Callable[[], Any]:
        return _in_inference_mode(s.model, inputs)

    def setup() -> _Setup:
        program = torch.export.load(path)
        # scripted: never used (no peer here runs TorchScript)
        return _Setup(program.module(), inputs, None, [], "inductor", exporters=("dynamo",),
                      program=program)

    return _runners_from({"eager": make_eager, "onnxruntime": _make_onnxruntime,
                          "torch_compile": _make_torch_compile,
                          **_ours(path, inputs, module, untuned)}, setup)


def _ours(path: str, inputs: tuple, module: sr.StaticModule | None,
          untuned: bool) -> dict[str, Factory]:
    ours = {"static_runtime": _ours_from_file(path, inputs, module)}
    if untuned:
        ours["static_runtime_untuned"] = _ours_from_file(path, inputs, None, UNTUNED)
    return ours


def _ours_from_file(path: str, inputs: tuple, module: sr.StaticModule | None,
                    options: sr.StaticModuleOptions | None = None) -> Factory:
    """The factory of our runner for a model file: ``module`` if given, else
    ``StaticModule(path, options)``."""

    def make_ours(s: _Setup) -> Callable[[], Any]:
        mod = module if module is not None else sr.StaticModule(path, options=options)
        s.details["held"] = _arena_bytes(mod)
        rt = mod.runtime()
        return lambda: rt(*inputs)

    return make_ours


def _runners_from(factories: dict[str, Factory], setup: Callable[[], _Setup]) -> list[Runner]:
    """One ``Runner`` per factory, in order, each given a fresh ``setup()`` (its own loaded
    model; ours, which loads the file itself, an empty one): built, then called once (outside
    timing; it also proves the peer can run the model). A failure, loading included, becomes
    the runner's one-line note."""
    runners: list[Runner] = []
    for name, factory in factories.items():
        s: _Setup | None = None
        try:
            start = time.perf_counter()
            s = _Setup(None, (), None, [], "") if name.startswith("static_runtime") \
                else setup()
            fn = factory(s)
            seconds = time.perf_counter() - start
            start = time.perf_counter()
            fn()
            first = time.perf_counter() - start
            held = s.details.pop("held", None)
            runners.append(Runner(name, fn, seconds, first_call_seconds=first,
                                  caveats=s.caveats, details=s.details, held_bytes=held))
        except Exception as e:  # noqa: BLE001  (a peer that cannot run the model is reported)
            details = {} if s is None else s.details
            details.pop("held", None)
            details["error"] = f"{type(e).__name__}: {str(e)[:4000]}"
            runners.append(Runner(name, _refused(_reason(e)), float("nan"), note=_reason(e),
                                  caveats=[] if s is None else s.caveats, details=details))
    return runners
