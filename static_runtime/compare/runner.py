"""A runner: one way of running a model on fixed inputs, built by a peer's factory from a
``_Setup``, and the one-line reason it gives when it cannot run the model."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch


@dataclass
class Runner:
    """One way of running the model: ``fn()`` runs it once on the fixed inputs.

    ``setup_seconds`` is the time to build it (scripting, freezing, exporting; for
    ``torch_compile`` also the first call, which compiles), ``first_call_seconds`` that of
    the first call after (where our runtime plans memory). ``note`` is set when the peer
    cannot run the model, and says why; ``caveats`` are reservations about a peer that
    runs. ``details`` holds peer-specific figures (export and compile times, the exporter
    used, the error).
    """

    name: str
    fn: Callable[[], Any]
    setup_seconds: float
    note: str = ""
    first_call_seconds: float = float("nan")
    caveats: list[str] = field(default_factory=list)
    details: dict[str, Any] = field(default_factory=dict)
    #: tensor bytes the runner keeps between calls (our arena); None: none that it knows of
    held_bytes: Callable[[], int] | None = None


@dataclass
class _Setup:
    """What a runner factory is given, and where it reports caveats and details."""

    model: torch.nn.Module
    inputs: tuple
    scripted: torch.jit.ScriptModule
    check_inputs: list[tuple]
    compile_backend: str
    #: the ONNX exporters to try, in order (None: all of ``ONNX_EXPORTERS``)
    exporters: tuple[str, ...] | None = None
    #: a ``torch.export`` program, exported to ONNX by the ``dynamo`` exporter instead of
    #: ``model`` (for a ``.pt2`` archive, whose ``model`` is the program's ``module()``)
    program: Any = None
    caveats: list[str] = field(default_factory=list)
    details: dict[str, Any] = field(default_factory=dict)
    #: run after setup and the first call are timed, before the timed calls (None: nothing)
    warm_up: Callable[[], None] | None = None

    def eager(self, inputs: tuple) -> Any:
        with torch.inference_mode():
            return self.model(*inputs)


def _reason(e: BaseException) -> str:
    """A one-line reason for a refusal: the innermost cause's type and the first line of its
    message that says something (not a bare header ending in ':'); the outer type too when
    it differs (``TorchExportError <- GuardOnDataDependentSymNode: ...``)."""
    root = e
    while root.__cause__ is not None and root.__cause__ is not root:
        root = root.__cause__
    text = re.sub(r"\x1b\[[0-9;]*m", "", str(root))
    lines = [ln.strip() for ln in text.strip().splitlines() if ln.strip()]
    line = next((ln for ln in lines if not ln.endswith(":")), lines[0] if lines else "")
    kind = type(root).__name__
    if root is not e:
        kind = f"{type(e).__name__} <- {kind}"
    return f"{kind}: {line[:300]}" if line else kind


def _refused(reason: str) -> Callable[[], Any]:
    def fn():
        raise RuntimeError(reason)

    return fn
