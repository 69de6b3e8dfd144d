"""Running OpInfos: in this process (``run_opinfo``) or in crash-safe subprocesses (``run_all``).

Every unit of work — one OpInfo sample, variant and option set, keyed
``"<op>|<sample>|<variant>|<option>"`` — is announced (a ``begin`` line) before it runs and
recorded (a result line) after, as JSON lines in the worker's file, flushed at once. A
worker that dies (segfault, abort) or overruns the per-unit timeout (killed) therefore
loses only the unit in flight: the parent records it as a ``crash`` and starts a new worker
on the same file, which skips every unit already recorded. Sample generation is announced
as ``"<op>|samples"``; a crash there is recorded for the whole OpInfo (option ``*``).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Protocol

import torch
from torch.utils import _pytree as pytree

import static_runtime as sr
from tools.opdb.cases import (
    DEFAULT_VARIANTS,
    build_module,
    call_inputs,
    full_name,
    generate,
    pick_dtype,
    pick_indices,
    random_reason,
)
from tools.opdb.check import Outcome, Status, check_case

#: The option sets each case runs under (``--options`` picks among them).
OPTION_SETS: dict[str, sr.StaticModuleOptions] = {
    "default": sr.StaticModuleOptions(verify_memory_plans=True),
    "fused": sr.StaticModuleOptions(fusion_compiler="inductor", verify_memory_plans=True),
}

#: Builds our runtime for a TorchScript module (tests pass fakes that misbehave on purpose).
MakeOurs = Callable[[Any, sr.StaticModuleOptions], Callable[..., Any]]

_ROOT = Path(__file__).resolve().parents[2]


def static_module(oracle: Any, options: sr.StaticModuleOptions) -> Callable[..., Any]:
    """Ours: a StaticModule of the (traced or scripted) module."""
    return sr.StaticModule(oracle, options=options)


class Sink(Protocol):
    """Where results go: ``status(key)`` is the recorded status of a unit, or None."""

    def status(self, key: str) -> str | None: ...
    def begin(self, key: str) -> None: ...
    def record(self, rec: dict[str, Any]) -> None: ...


class ListSink:
    """Results kept in memory (in-process runs)."""

    def __init__(self) -> None:
        self.records: list[dict[str, Any]] = []

    def status(self, key: str) -> str | None:
        return next((r["status"] for r in self.records if r["key"] == key), None)

    def begin(self, key: str) -> None:
        pass

    def record(self, rec: dict[str, Any]) -> None:
        self.records.append(rec)


class FileSink:
    """Results appended to a JSON-lines file, each line flushed; earlier lines are kept."""

    def __init__(self, path: Path) -> None:
        self.done = {r["key"]: r["status"] for r in read_lines(path) if "status" in r}
        self.file = open(path, "a", buffering=1)  # noqa: SIM115  (open for the worker's life)

    def status(self, key: str) -> str | None:
        return self.done.get(key)

    def _write(self, obj: dict[str, Any]) -> None:
        self.file.write(json.dumps(obj) + "\n")
        self.file.flush()

    def begin(self, key: str) -> None:
        self._write({"begin": key, "time": time.time()})

    def record(self, rec: dict[str, Any]) -> None:
        self.done[rec["key"]] = rec["status"]
        self._write(rec)


def read_lines(path: Path) -> list[dict[str, Any]]:
    """The complete JSON lines of a worker file (a torn last line is ignored)."""
    if not path.exists():
        return []
    out = []
    for line in path.read_text().splitlines():
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:
            pass
    return out


def describe(flat: Any) -> str:
    """The sample as text: tensors by dtype and shape (strides when not contiguous)."""
    def one(x: Any) -> Any:
        if isinstance(x, torch.Tensor):
            dtype = str(x.dtype).removeprefix("torch.")
            layout = "" if x.is_contiguous() else f" stride={tuple(x.stride())}"
            return _Raw(f"T{list(x.shape)}:{dtype}{layout}")
        return x
    inp, args, kwargs = pytree.tree_unflatten([one(x) for x in flat.leaves], flat.spec)
    return f"input={inp!r}, args={args!r}, kwargs={kwargs!r}"[:600]


class _Raw(str):
    def __repr__(self) -> str:
        return str(self)


def run_opinfo(op: Any, options: list[str], samples: int, sink: Sink,
               make_ours: MakeOurs = static_module,
               variants: Sequence[str] = DEFAULT_VARIANTS) -> None:
    """Every unit of one OpInfo not yet recorded in ``sink``, each recorded there."""
    name = full_name(op)
    key = f"{name}|samples"
    if sink.status(key) not in (None, "generated"):  # skipped, or crashed generating
        return
    base = {"op": name}
    reason = random_reason(op)
    dtype = pick_dtype(op)
    if reason is None and dtype is None:
        reason = "dtype: neither float32 nor int64 supported on CPU"
    if reason is not None:
        sink.record({"key": key, **base, "option": "*", "status": Status.SKIP.value,
                     "message": reason})
        return
    sink.begin(key)
    try:
        flats = generate(op, dtype)
        again = generate(op, dtype, salt=1)
    except Exception as e:  # noqa: BLE001
        sink.record({"key": key, **base, "option": "*", "status": Status.SKIP.value,
                     "message": f"samples: generating them raised {type(e).__name__}"})
        return
    if not flats:
        sink.record({"key": key, **base, "option": "*", "status": Status.SKIP.value,
                     "message": "samples: none for this dtype, or all with sparse tensors"})
        return
    sink.record({"key": key, **base, "option": "*", "status": "generated"})
    base["dtype"] = str(dtype).removeprefix("torch.")
    for index in pick_indices(len(flats), samples):
        inputs = None
        for variant in variants:
            module = None
            for option in options:
                unit = f"{name}|{index}|{variant}|{option}"
                if sink.status(unit) is not None:
                    continue
                sink.begin(unit)
                rec = {"key": unit, **base, "sample": index, "variant": variant,
                       "option": option, "sample_text": describe(flats[index])}
                try:  # everything after begin, so that a crash is this unit's
                    inputs = inputs or call_inputs(flats, again, index)
                    module = module or build_module(op, flats[index], variant)
                    rec.update(a2=inputs.a2_how, b_sample=inputs.b_index)
                    if isinstance(module, str):
                        outcome = Outcome(Status.SKIP, f"module: {module}")
                    else:
                        rec["module"] = module.how
                        outcome = check_case(module.oracle, _builder(make_ours, module.oracle,
                                                                     OPTION_SETS[option]),
                                             inputs)
                except Exception as e:  # noqa: BLE001  (the harness's own failure: shown)
                    outcome = Outcome(Status.SKIP, f"harness: {type(e).__name__}: {e}"[:300])
                sink.record({**rec, **outcome.as_dict()})


def _builder(make_ours: MakeOurs, oracle: Any,
             options: sr.StaticModuleOptions) -> Callable[[], Callable[..., Any]]:
    return lambda: make_ours(oracle, options)


def select(db: list[Any], names: list[str] | None) -> list[Any]:
    """OpInfos by full name, or by base name if no OpInfo has it as its full name (``max``
    picks every variant of max); all if None. In op_db order, each once."""
    if not names:
        return db
    full = {full_name(op) for op in db}
    base = {op.name for op in db}
    unknown = sorted(set(names) - full - base)
    if unknown:
        raise ValueError(f"not in op_db: {', '.join(unknown)}")
    exact = {n for n in names if n in full}
    by_base = {n for n in names if n not in full}
    return [op for op in db if full_name(op) in exact or op.name in by_base]


class _FaultySink(FileSink):
    """Fault injection for the crash-safety tests: the worker segfaults (``OPDB_SEGFAULT_AT``)
    or hangs (``OPDB_HANG_AT``) when the unit of that key begins."""

    def begin(self, key: str) -> None:
        super().begin(key)
        if key == os.environ.get("OPDB_SEGFAULT_AT"):
            import ctypes
            ctypes.string_at(0)
        if key == os.environ.get("OPDB_HANG_AT"):
            time.sleep(3600)


def worker(path: Path, names: list[str], options: list[str], samples: int,
           variants: Sequence[str] = DEFAULT_VARIANTS) -> None:
    """A subprocess's work: the named OpInfos, results appended to ``path``."""
    torch.set_num_threads(1)
    warnings.simplefilter("ignore")
    from tools.opdb.cases import op_db
    faults = "OPDB_SEGFAULT_AT" in os.environ or "OPDB_HANG_AT" in os.environ
    sink = _FaultySink(path) if faults else FileSink(path)
    for op in select(op_db(), names):
        run_opinfo(op, options, samples, sink, variants=variants)


def _in_flight(lines: list[dict[str, Any]]) -> tuple[str | None, float]:
    """The unit announced last and not recorded, with when it began."""
    recorded = {r["key"] for r in lines if "status" in r}
    for r in reversed(lines):
        if "begin" in r:
            return (None, 0.0) if r["begin"] in recorded else (r["begin"], r["time"])
    return None, 0.0


def _crash_record(key: str, message: str) -> dict[str, Any]:
    op, _, rest = key.partition("|")
    parts = rest.split("|")
    rec: dict[str, Any] = {"key": key, "op": op, "status": Status.CRASH.value,
                           "message": message}
    if len(parts) == 3:
        rec.update(sample=int(parts[0]), variant=parts[1], option=parts[2])
    else:
        rec["option"] = "*"
    return rec


class _Chunk:
    def __init__(self, n: int, names: list[str], workdir: Path) -> None:
        self.n, self.names = n, names
        self.path = workdir / f"chunk{n:03d}.jsonl"
        self.err = workdir / f"chunk{n:03d}.stderr"
        self.proc: subprocess.Popen | None = None
        self.restarts = 0

    def start(self, options: list[str], samples: int, variants: Sequence[str]) -> None:
        env = dict(os.environ, OMP_NUM_THREADS="1", TORCHINDUCTOR_COMPILE_THREADS="1",
                   PYTHONPATH=os.pathsep.join([str(_ROOT), os.environ.get("PYTHONPATH", "")]))
        cmd = [sys.executable, "-m", "tools.opdb", "--worker", str(self.path),
               "--ops", ",".join(self.names), "--options", ",".join(options),
               "--samples", str(samples), "--variants", ",".join(variants)]
        with open(self.err, "w") as err:
            self.proc = subprocess.Popen(cmd, cwd=_ROOT, env=env, stdout=subprocess.DEVNULL,
                                         stderr=err, start_new_session=True)

    def kill(self) -> None:
        assert self.proc is not None
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)  # the worker and any compiler it started
        except ProcessLookupError:
            pass
        self.proc.wait()

    def stderr_tail(self) -> str:
        lines = self.err.read_text(errors="replace").strip().splitlines() if self.err.exists() \
            else []
        return " | ".join(lines[-3:])[-600:]


def run_all(names: list[str], options: list[str], samples: int, jobs: int, chunk: int,
            timeout: float, workdir: Path, progress: Callable[[str], None] = lambda s: None,
            variants: Sequence[str] = DEFAULT_VARIANTS) -> list[dict[str, Any]]:
    """All OpInfos named, ``chunk`` per subprocess, ``jobs`` subprocesses at a time."""
    pending = [_Chunk(i, names[s:s + chunk], workdir)
               for i, s in enumerate(range(0, len(names), chunk))]
    running: list[_Chunk] = []
    finished: list[_Chunk] = []
    try:
        _loop(pending, running, finished, jobs, options, samples, variants, timeout, progress)
    finally:  # interrupted: no worker outlives the run
        for c in running:
            c.kill()
    return [r for c in sorted(finished, key=lambda c: c.n) for r in read_lines(c.path)
            if "status" in r]


def _loop(pending: list[_Chunk], running: list[_Chunk], finished: list[_Chunk], jobs: int,
          options: list[str], samples: int, variants: Sequence[str], timeout: float,
          progress: Callable[[str], None]) -> None:
    """Start chunks ``jobs`` at a time, watch them, record crashes and restart (see run_all)."""
    total = len(pending)
    while pending or running:
        while pending and len(running) < jobs:
            c = pending.pop(0)
            c.start(options, samples, variants)
            running.append(c)
        time.sleep(0.5)
        for c in list(running):
            assert c.proc is not None
            rc = c.proc.poll()
            key, began = _in_flight(read_lines(c.path))
            if rc is None:
                if key is None or time.time() - began <= timeout:
                    continue
                c.kill()
                key = _in_flight(read_lines(c.path))[0]  # read again: it may have just ended
                if key is not None:
                    _append(c.path, _crash_record(key, f"timeout: killed after {timeout:.0f} s"))
                restart = True
            elif rc != 0:
                how = f"signal {-rc}" if rc < 0 else f"exit code {rc}"
                if key is not None:
                    _append(c.path, _crash_record(
                        key, f"worker died ({how}) during this unit: {c.stderr_tail()}"))
                else:  # not restarted: it would die the same way again
                    _append(c.path, _crash_record(
                        f"{c.names[0]}|worker", f"worker died ({how}) outside any unit: "
                        f"{c.stderr_tail()}"))
                restart = key is not None
            else:
                restart = False
            running.remove(c)
            if restart and c.restarts < 200:
                c.restarts += 1
                c.start(options, samples, variants)
                running.append(c)
            else:
                finished.append(c)
                progress(f"chunk {len(finished)}/{total} done ({c.names[0]} .. {c.names[-1]}, "
                         f"{c.restarts} restarts)")


def _append(path: Path, rec: dict[str, Any]) -> None:
    with open(path, "a") as f:
        f.write(json.dumps(rec) + "\n")
