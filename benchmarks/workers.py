"""One benchmark case in a fresh Python process: what ``latency.py`` and ``op_compare.py``
share. A case gets a process of its own so that one peer's state (caches, allocator, thread
pools, compiled code) cannot colour the next case's figures."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path
from typing import Any

#: A case that takes longer than this is reported as timed out, not waited for.
WORKER_TIMEOUT_SECONDS = 900


def run_worker(cmd: list[str], out: Path, head: dict[str, Any],
               env: dict[str, str] | None = None) -> dict[str, Any]:
    """Run ``cmd`` (a worker that writes its result as JSON to ``out``); the result with
    ``worker_seconds`` added, or ``head`` with an ``error`` saying why there is none (a time
    out, or the exit status and the last lines the worker wrote to stderr)."""
    start = time.perf_counter()
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env, check=False,
                              timeout=WORKER_TIMEOUT_SECONDS)
    except subprocess.TimeoutExpired:
        return {**head, "error": f"worker timed out after {WORKER_TIMEOUT_SECONDS} s"}
    if proc.returncode == 0 and out.exists():
        result = json.loads(out.read_text())
        result["worker_seconds"] = time.perf_counter() - start
        return result
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    # (the exception's own line: a TorchScript traceback ends with its source excerpt)
    errors = [ln for ln in lines if "Error" in ln.split(":", 1)[0]][-2:]
    tail = [*errors, *(ln for ln in lines[-3:] if ln not in errors)] or ["no output"]
    return {**head, "error": f"worker exited with {proc.returncode}: " + " | ".join(tail)[:900]}


def run_script(code: str, *args: object) -> dict[str, Any]:
    """Run ``python -c code args`` in a fresh process at the repository's root (on its path),
    one case a process; the JSON object its last line of output prints."""
    import os
    import sys

    root = Path(__file__).resolve().parents[1]
    env = dict(os.environ, PYTHONPATH=str(root))
    out = subprocess.run([sys.executable, "-c", code, *map(str, args)], check=True, cwd=root,
                         env=env, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])
