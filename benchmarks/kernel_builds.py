"""A kernel file of ``ops/ckernels`` built at two git revisions, side by side in one process:
how a kernel change is timed on a machine whose speed moves by up to 2 × between runs a
minute apart (the Xeon of sessions 20–24). Each build is compiled with the flags the
runtime's own library was built with and loaded by ``ctypes``; the callers alternate the
builds round by round (``alternate``) and check that they give the same bits."""

from __future__ import annotations

import ctypes
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # (run as a script)
    sys.path.insert(0, str(ROOT))

from static_runtime.ops import ckernels

SOURCE = Path("static_runtime/ops/ckernels")


def sources(names: tuple[str, ...], rev: str | None) -> dict[str, str]:
    """The files ``names`` of ``ops/ckernels`` at git revision ``rev`` (None: the working
    tree)."""
    out = {}
    for name in names:
        if rev is None:
            out[name] = (ROOT / SOURCE / name).read_text()
        else:
            out[name] = subprocess.run(["git", "show", f"{rev}:{SOURCE / name}"], cwd=ROOT,
                                       check=True, capture_output=True, text=True).stdout
    return out


def build(files: dict[str, str], main: str, where: Path) -> ctypes.CDLL:
    """``main`` (one of ``files``, given as their text) built as the runtime builds its
    library, in the directory ``where``."""
    for name, text in files.items():
        (where / name).write_text(text)
    ckernels.library()  # (its flags: the first set the compiler took)
    flags = ckernels._built_with or ckernels._flag_sets()[0]
    target = where / (Path(main).stem + ".so")
    subprocess.run([os.environ.get("CC") or "cc", *flags, *ckernels._BASE_FLAGS, "-o",
                    str(target), str(where / main), "-lm"], check=True, capture_output=True)
    return ctypes.CDLL(str(target))


def alternate(calls: dict[str, Callable[[], object]], rounds: int, reps: int
              ) -> dict[str, float]:
    """Median µs a call of each of ``calls``: every round times ``reps`` calls of each in
    turn, the order reversed every other round."""
    times: dict[str, list[float]] = {name: [] for name in calls}
    order = list(calls)
    for r in range(rounds):
        for name in order if r % 2 else order[::-1]:
            call = calls[name]
            start = time.perf_counter_ns()
            for _ in range(reps):
                call()
            times[name].append((time.perf_counter_ns() - start) / reps / 1e3)
    return {name: statistics.median(t) for name, t in times.items()}
