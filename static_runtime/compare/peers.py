"""Side-by-side comparison with the runtimes people use today, in one process.

Used by the demo, the ``bench`` command and ``benchmarks/``. Timing follows the house
rules: single-threaded unless asked otherwise, runners alternated within each repeat so
machine noise hits them alike, medians of repeats reported.

The runners (``RUNNERS``), each given the model and one fixed tuple of inputs:

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
==========================  ===================================================================

``scripted`` is ``torch.jit.script(model)``, or the TorchScript module the caller prepared
(a traced Hugging Face model, which cannot be scripted); ONNX's TorchScript-based exporter
exports it, the others ``model``.

A peer that cannot run the model is reported, not fatal: its ``Runner`` has a ``note`` (why)
and a ``fn`` that raises. A peer that runs but with reservations (an export that is lossy, a
graph break) lists them in ``caveats``.
"""

from __future__ import annotations

import contextlib
import inspect
import io
import re
import statistics
import tempfile
import time
import traceback
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch.utils import _pytree as pytree

import static_runtime as sr
from static_runtime.runtime.hot import wait_for_builds

RUNNERS = ("eager", "torchscript", "optimize_for_inference", "pytorch_static_runtime",
           "torch_compile", "onnxruntime", "static_runtime", "static_runtime_fused",
           "static_runtime_measured")
DEMO_RUNNERS = ("eager", "torchscript", "pytorch_static_runtime", "static_runtime")

# Tolerances of outputs_agree, also used to decide whether an ONNX export is faithful.
RTOL, ATOL = 1e-4, 1e-5


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
class Timing:
    name: str
    samples_us: list[float] = field(default_factory=list)

    @property
    def median_us(self) -> float:
        return statistics.median(self.samples_us)


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


def _make_static_runtime_measured(s: _Setup) -> Callable[[], Any]:
    """Ours with ``kernel_choice="measure"``: GEMM kernels timed on this CPU on the first
    call of each row count (counted in the first call; a warm cache times nothing)."""
    return _make_static_runtime(s, sr.StaticModuleOptions(kernel_choice="measure"))


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


_FACTORIES: dict[str, Callable[[_Setup], Callable[[], Any]]] = {
    "eager": _make_eager,
    "torchscript": _make_torchscript,
    "optimize_for_inference": _make_optimize_for_inference,
    "pytorch_static_runtime": _make_pytorch_static_runtime,
    "torch_compile": _make_torch_compile,
    "onnxruntime": _make_onnxruntime,
    "static_runtime": _make_static_runtime,
    "static_runtime_fused": _make_static_runtime_fused,
    "static_runtime_measured": _make_static_runtime_measured,
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


def _refused(reason: str) -> Callable[[], Any]:
    def fn():
        raise RuntimeError(reason)

    return fn


def _agree(got: Any, expected: Any) -> bool:
    try:
        torch.testing.assert_close(got, expected, rtol=RTOL, atol=ATOL)
    except AssertionError:
        return False
    return True


def _max_abs_error(got: Any, expected: Any) -> float | None:
    """The largest absolute difference between two outputs of the same structure (None if
    the structures or shapes differ)."""
    a, b = pytree.tree_leaves(got), pytree.tree_leaves(expected)
    if len(a) != len(b):
        return None
    worst = 0.0
    for x, y in zip(a, b):
        if isinstance(x, torch.Tensor) != isinstance(y, torch.Tensor):
            return None
        if isinstance(x, torch.Tensor):
            if x.shape != y.shape:
                return None
            if x.numel():
                worst = max(worst, (x.double() - y.double()).abs().max().item())
        elif x != y:
            return float("inf")
    return worst


def outputs_agree(runners: list[Runner], reference: str = "eager") -> dict[str, bool | None]:
    """Whether each runner's output equals the reference's (None where it cannot run)."""
    ref = next(r for r in runners if r.name == reference).fn()
    result: dict[str, bool | None] = {}
    for r in runners:
        if r.note:
            result[r.name] = None
            continue
        result[r.name] = _agree(r.fn(), ref)
    return result


def output_errors(runners: list[Runner], reference: str = "eager") -> dict[str, float | None]:
    """Each runner's largest absolute difference from the reference's output (None where it
    cannot run or its output has another structure)."""
    ref = next(r for r in runners if r.name == reference).fn()
    return {r.name: None if r.note else _max_abs_error(r.fn(), ref) for r in runners}


def time_runners(runners: list[Runner], *, repeats: int = 15, calls: int = 50,
                 warmup: int = 20,
                 progress: Callable[[int], None] | None = None) -> dict[str, Timing]:
    """µs per call for each runnable runner: ``repeats`` samples of ``calls`` calls each,
    runners alternated within every repeat. Each sample starts with one untimed call: with
    few calls per sample (a slow peer sets the count), the first call after another
    runner's pays for the caches that runner left cold — after ONNX Runtime's 5 ms DCN-v2
    call, 3-call samples of ours measured 1.6 × its steady state."""
    live = [r for r in runners if not r.note]
    for r in live:
        for _ in range(warmup):
            r.fn()
    # Our hot signatures get code of their own from a background thread: let it finish (the
    # first call of each sample, untimed, then takes it up).
    wait_for_builds()
    timings = {r.name: Timing(r.name) for r in live}
    clock = time.perf_counter_ns
    for k in range(repeats):
        for r in live:
            fn = r.fn
            fn()
            start = clock()
            for _ in range(calls):
                fn()
            timings[r.name].samples_us.append((clock() - start) / calls / 1e3)
        if progress is not None:
            progress(k)
    return timings


def median_us(fns: dict[str, Callable[[], Any]], *, repeats: int = 15, calls: int = 50,
              warmup: int = 20) -> dict[str, float]:
    """``time_runners`` for plain functions: name → median µs per call."""
    runners = [Runner(name, fn, 0.0) for name, fn in fns.items()]
    timings = time_runners(runners, repeats=repeats, calls=calls, warmup=warmup)
    return {name: t.median_us for name, t in timings.items()}


def _arena_bytes(mod: sr.StaticModule | None) -> Callable[[], int] | None:
    """Bytes of ``mod``'s most recent arena, read when asked (after the runner's calls)."""
    if mod is None:
        return None

    def held() -> int:
        try:
            return mod.memory_plan().arena_bytes
        except RuntimeError:  # memory planning off, or no plan yet: no arena is held
            return 0

    return held


# --------------------------------------------------------------------------- memory


@dataclass(frozen=True)
class MemoryFigures:
    """Tensor memory of one steady-state call, as PyTorch's CPU allocator sees it.

    ``peak_bytes``: the most bytes allocated during the call and not yet freed, above what
    was allocated when it began (outputs included; weights, which exist before, are not).
    ``allocated_bytes``: all bytes allocated during the call. ``held_bytes``: tensor memory
    the runner keeps between calls (our arena: PyTorch's C++ Static Runtime allocates and
    frees its managed buffer within each call, so it shows up in its peak instead).
    ``total_bytes = peak_bytes + held_bytes``: what a call needs.
    """

    peak_bytes: int
    allocated_bytes: int
    allocations: int
    held_bytes: int

    @property
    def total_bytes(self) -> int:
        return self.peak_bytes + self.held_bytes


def measure_memory(runner: Runner) -> MemoryFigures:
    """Run ``runner`` once under ``torch.profiler`` with memory profiling and replay the
    allocator's events in order (the allocation events of the profiler's event tree carry
    each allocation's size, negative for a free). The output is dropped inside the window."""
    from torch._C._profiler import _EventType
    from torch.profiler import ProfilerActivity, profile

    if runner.note:
        raise ValueError(f"{runner.name} cannot run the model: {runner.note}")
    fn = runner.fn
    fn()
    with _quiet_stderr(), profile(activities=[ProfilerActivity.CPU], profile_memory=True) as p:
        out = fn()
        del out
    sizes: list[tuple[int, int]] = []
    stack = list(p.profiler.kineto_results.experimental_event_tree())
    while stack:
        e = stack.pop()
        if e.tag == _EventType.Allocation:
            sizes.append((e.start_time_ns, e.extra_fields.alloc_size))
        stack.extend(e.children)
    sizes.sort()
    live = peak = allocated = count = 0
    for _, n in sizes:
        live += n
        peak = max(peak, live)
        if n > 0:
            allocated += n
            count += 1
    held = runner.held_bytes() if runner.held_bytes is not None else 0
    return MemoryFigures(peak, allocated, count, held)


class _quiet_fds:
    """Silence file descriptors ``fds`` (C++ code's output, which ``sys.stdout`` and
    ``sys.stderr`` redirection cannot reach) for a block; Python's buffers are flushed first
    so that nothing written before is lost."""

    def __init__(self, *fds: int):
        self._fds = fds or (2,)

    def __enter__(self):
        import os
        import sys

        sys.stdout.flush()
        sys.stderr.flush()
        self._null = os.open(os.devnull, os.O_WRONLY)
        self._saved = []
        for fd in self._fds:
            self._saved.append(os.dup(fd))
            os.dup2(self._null, fd)
        return self

    def __exit__(self, *exc):
        import os

        for fd, saved in zip(self._fds, self._saved):
            os.dup2(saved, fd)
            os.close(saved)
        os.close(self._null)
        return False


def _quiet_stderr() -> _quiet_fds:
    """Silence file descriptor 2 (the profiler's C++ start/stop log lines) for a block."""
    return _quiet_fds(2)
