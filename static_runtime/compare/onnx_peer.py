"""The ONNX Runtime peer: the model exported by the first ONNX exporter whose output equals
eager's on the inputs and on the check inputs, run by an ONNX Runtime session with the same
thread count (see ``peers.py`` for how the peers are set up and compared)."""

from __future__ import annotations

import contextlib
import inspect
import io
import tempfile
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch.utils import _pytree as pytree

from static_runtime.compare.agreement import _agree, _max_abs_error
from static_runtime.compare.quiet import _quiet_fds
from static_runtime.compare.runner import _reason, _Setup

# The ONNX exporters tried, in order: torch.export-based; TorchScript-based on the scripted
# module (keeps data-dependent ``if`` and loops as ONNX If/Loop); TorchScript-based by tracing
# (bakes in the branch the example inputs take, which the check inputs are there to catch).
ONNX_EXPORTERS = ("dynamo", "torchscript_scripted", "torchscript_traced")


def _make_onnxruntime(s: _Setup) -> Callable[[], Any]:
    try:
        import onnxruntime as ort
    except ImportError:  # the note says what to do; the import's own message adds nothing
        raise RuntimeError("onnxruntime is not installed (pip install -e '.[bench]')") from None
    options = ort.SessionOptions()
    options.intra_op_num_threads = torch.get_num_threads()
    options.inter_op_num_threads = 1
    options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    # Default arguments made explicit: the TorchScript-based exporter turns them into
    # graph inputs (ControlFlowModel's ``steps``), which then need feeding.
    args = _with_defaults(s.model, s.inputs)
    checks = [(_with_defaults(s.model, c), s.eager(c)) for c in s.check_inputs]
    expected = s.eager(s.inputs)
    attempts: list[dict[str, Any]] = []
    refusals: list[str] = []
    chosen: tuple[Callable[[], Any], dict, list[str]] | None = None
    with tempfile.TemporaryDirectory() as tmp:
        for exporter in s.exporters or ONNX_EXPORTERS:
            path = Path(tmp) / f"{exporter}.onnx"
            caveats: list[str] = []
            attempt: dict[str, Any] = {"exporter": exporter}
            attempts.append(attempt)
            try:
                attempt["export_seconds"] = _onnx_export(s, args, path, exporter, caveats)
                start = time.perf_counter()
                session = ort.InferenceSession(str(path), options,
                                               providers=["CPUExecutionProvider"])
                attempt["session_seconds"] = time.perf_counter() - start
                attempt["onnx_ops"] = _onnx_op_counts(path)
                call = _ort_caller(session, args, expected)
                got = call(args)
            except Exception as e:  # noqa: BLE001  (the next exporter may do better)
                attempt["outcome"] = _reason(e)
                refusals.append(f"{exporter} exporter: {_reason(e)}")
                continue
            if not _agree(got, expected):
                caveats.append(f"output differs from eager (max |Δ| "
                               f"{_max_abs_error(got, expected)})")
            for k, (check_args, want) in enumerate(checks, start=1):
                try:
                    got = call(check_args)
                except Exception as e:  # noqa: BLE001  (reported, the export may be fine)
                    caveats.append(f"check input set {k} not run: {_reason(e)}")
                    continue
                if not _agree(got, want):
                    caveats.append(f"lossy: differs from eager on check input set {k} "
                                   f"(max |Δ| {_max_abs_error(got, want)})")
                    break
            faithful = not any(c.startswith(("output differs", "lossy")) for c in caveats)
            attempt["outcome"] = "ok" if faithful else "; ".join(caveats)
            if chosen is None or faithful:
                chosen = (_bound(call, args), attempt, caveats)
            if faithful:
                break
    s.details["onnx_attempts"] = attempts
    if chosen is None:
        raise RuntimeError("; ".join(refusals))
    run, attempt, caveats = chosen
    s.details.update(exporter=attempt["exporter"], export_seconds=attempt["export_seconds"],
                     session_seconds=attempt["session_seconds"], onnx_ops=attempt["onnx_ops"])
    s.caveats.extend(r for r in refusals if not r.startswith(attempt["exporter"]))
    s.caveats.extend(caveats)
    loops = attempt["onnx_ops"].get("Loop", 0)
    if loops:
        # ONNX has no EmbeddingBag: exporters lower it to a Loop over the bags, whose cost
        # grows with the batch; worth knowing when reading ORT's time.
        s.caveats.append(f"the exported graph has {loops} ONNX Loop node(s)")
    return run


def _onnx_op_counts(path: Path) -> dict[str, int]:
    """How many nodes of each ONNX op type the exported graph's top level has."""
    import onnx

    counts: dict[str, int] = {}
    for node in onnx.load(str(path), load_external_data=False).graph.node:
        counts[node.op_type] = counts.get(node.op_type, 0) + 1
    return dict(sorted(counts.items(), key=lambda kv: -kv[1]))


def _with_defaults(model: torch.nn.Module, inputs: tuple) -> tuple:
    try:
        bound = inspect.signature(model.forward).bind(*inputs)
    except (TypeError, ValueError):  # no Python signature (a loaded TorchScript method)
        return inputs
    bound.apply_defaults()
    return tuple(bound.args)


def _onnx_export(s: _Setup, args: tuple, path: Path, exporter: str,
                 caveats: list[str]) -> float:
    """Export to ``path`` with ``exporter`` (one of ``ONNX_EXPORTERS``); returns the
    seconds the export took. Tracer warnings (the trace may not generalise) become caveats."""
    if exporter == "dynamo":
        import onnxscript  # noqa: F401  (imported before timing: the exporter needs it)
    model = s.scripted if exporter == "torchscript_scripted" else s.model
    if exporter == "dynamo" and s.program is not None:
        model = s.program
    if exporter == "torchscript_scripted":
        # Scripted modules may not take None (it breaks type propagation); drop trailing ones.
        while args and args[-1] is None:
            args = args[:-1]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        start = time.perf_counter()
        # The exporters narrate, in Python (the dynamo one's progress lines) and in C++ (the
        # TorchScript one's graph at a failure, on std::cout): the exception says what failed.
        with torch.no_grad(), contextlib.redirect_stdout(io.StringIO()), _quiet_fds(1, 2):
            torch.onnx.export(model, args, str(path), dynamo=exporter == "dynamo",
                              external_data=False, verbose=False)
        seconds = time.perf_counter() - start
    seen = set()
    for w in caught:
        if issubclass(w.category, torch.jit.TracerWarning):
            text = str(w.message).splitlines()[0][:160]
            if text not in seen:
                seen.add(text)
                caveats.append(f"tracer warning: {text}")
    return seconds


_ONNX_NUMPY_TYPES = {"tensor(float)": "float32", "tensor(double)": "float64",
                     "tensor(int64)": "int64", "tensor(int32)": "int32", "tensor(bool)": "bool"}


def _ort_caller(session: Any, args: tuple, expected: Any = None) -> Callable[[tuple], Any]:
    """``call(args)``: runs ``session`` on the leaves of ``args``. Tensors are fed as
    zero-copy NumPy views; Python scalars only if the export made them graph inputs.

    The outputs are put in the structure of ``expected`` (eager's output) when it has as
    many leaves as the session has outputs — a 1-tuple stays a tuple, an ``int`` leaf (which
    ONNX returns as a 0-d tensor) becomes an ``int`` again; otherwise one output is returned
    bare and several as a tuple."""
    import numpy as np

    inputs = session.get_inputs()
    leaves = [x for x in pytree.tree_leaves(args) if x is not None]
    tensors = [isinstance(x, torch.Tensor) for x in leaves]
    if len(inputs) == sum(tensors):
        keep = [k for k, t in enumerate(tensors) if t]
    elif len(inputs) == len(leaves):
        keep = list(range(len(leaves)))
    else:
        raise RuntimeError(f"the exported model takes {len(inputs)} inputs; the model "
                           f"{sum(tensors)} tensors and {len(leaves) - sum(tensors)} scalars")
    names = [i.name for i in inputs]
    dtypes = [_ONNX_NUMPY_TYPES.get(i.type, None) for i in inputs]
    leaves_out, spec = pytree.tree_flatten(expected)
    restructure = expected is not None and len(leaves_out) == len(session.get_outputs())
    kinds = [type(x) if isinstance(x, (bool, int, float)) else None for x in leaves_out]

    def call(args: tuple) -> Any:
        leaves = [x for x in pytree.tree_leaves(args) if x is not None]
        feed = {}
        for name, dtype, k in zip(names, dtypes, keep):
            x = leaves[k]
            feed[name] = x.numpy() if isinstance(x, torch.Tensor) else np.asarray(x, dtype)
        outs = [torch.from_numpy(o) for o in session.run(None, feed)]
        if restructure:
            return pytree.tree_unflatten(
                [o if kind is None else kind(o.item()) for o, kind in zip(outs, kinds)], spec)
        return outs[0] if len(outs) == 1 else tuple(outs)

    return call


def _bound(call: Callable[[tuple], Any], args: tuple) -> Callable[[], Any]:
    return lambda: call(args)
