"""Memory, side by side: our arena against its lower bound and against PyTorch's C++ Static
Runtime's managed bytes; minor page faults per call in steady state and peak RSS growth for
eager PyTorch, frozen TorchScript, the C++ Static Runtime and ours.

Every (model, runtime) pair runs in a fresh process, single-threaded, so allocator state
from one cannot flatter another.

    python benchmarks/memory.py                 # all models, table + benchmarks/results/memory.json
    python benchmarks/memory.py --models resnet_small,dlrm --calls 500
"""

from __future__ import annotations

import json
import os
import re
import resource
import subprocess
import sys
import tempfile
import warnings
from pathlib import Path

import click

RUNTIMES = ("eager", "torchscript", "pytorch_static_runtime", "static_runtime")
DEFAULT_MODELS = ("mlp", "dlrm", "multi_head_attention", "transformer_encoder", "resnet_small",
                  "control_flow")
RESULTS = Path(__file__).parent / "results"


def _rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _cpp_managed_bytes(scripted, inputs) -> int | None:
    """'Total memory managed' as PyTorch's C++ runtime prints it (captured from fd 1); None
    where its ``benchmark`` cannot take the inputs (its Python binding accepts tensors
    only, not DLRM's lists)."""
    import torch

    if not all(isinstance(x, torch.Tensor) for x in inputs):
        return None
    sm = torch._C._jit_to_static_module(scripted._c)
    with tempfile.TemporaryFile(mode="w+b") as tmp:
        sys.stdout.flush()
        saved = os.dup(1)
        os.dup2(tmp.fileno(), 1)
        try:
            sm.benchmark(list(inputs), {}, 1, 2)
        finally:
            sys.stdout.flush()
            os.dup2(saved, 1)
            os.close(saved)
        tmp.seek(0)
        text = tmp.read().decode(errors="replace")
    m = re.search(r"Total memory managed: (\d+) bytes", text)
    return int(m.group(1)) if m else None


def worker(model: str, runtime: str, batch: int, calls: int) -> dict:
    import torch

    import static_runtime as sr
    from static_runtime.models import MODELS

    torch.set_num_threads(1)
    warnings.simplefilter("ignore")
    rss_at_start = _rss_bytes()  # torch imported, nothing built yet
    spec = MODELS[model]
    module = spec.build()
    inputs = spec.example_inputs(batch)
    scripted = torch.jit.script(module)
    result: dict = {"model": model, "runtime": runtime, "batch": batch}
    if runtime == "eager":
        def fn():
            with torch.inference_mode():
                return module(*inputs)
    elif runtime == "torchscript":
        frozen = torch.jit.freeze(torch.jit.script(module))

        def fn():
            with torch.inference_mode():
                return frozen(*inputs)
    elif runtime == "pytorch_static_runtime":
        sm = torch._C._jit_to_static_module(scripted._c)

        def fn():
            return sm(*inputs)
    else:
        mod = sr.StaticModule(scripted)
        rt = mod.runtime()
        fn = lambda: rt(*inputs)
    for _ in range(20):  # warm up: plans made, caches filled
        fn()
    faults_before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for _ in range(calls):
        fn()
    faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - faults_before
    result["minor_faults_per_call"] = faults / calls
    # Peak over the whole run (building, preparing, warming up, steady state) above the
    # RSS the process had before the model existed.
    result["peak_rss_bytes"] = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
                                - rss_at_start)
    if runtime == "static_runtime":
        plan = mod.memory_plan()
        result.update(arena_bytes=plan.arena_bytes, lower_bound_bytes=plan.lower_bound_bytes,
                      managed_tensors=len(plan), unplanned_bytes=plan.unplanned_bytes)
    if runtime == "pytorch_static_runtime":
        result["cpp_managed_bytes"] = _cpp_managed_bytes(scripted, inputs)
    return result


def run_isolated(model: str, runtime: str, batch: int, calls: int) -> dict:
    cmd = [sys.executable, __file__, "--worker", f"{model}:{runtime}", "--batch", str(batch),
           "--calls", str(calls)]
    for _attempt in range(2):  # TorchScript's profiling executor fails now and then
        proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
        lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
        if proc.returncode == 0 and lines:
            return json.loads(lines[-1])
    errors = [ln for ln in proc.stderr.splitlines() if "Error" in ln] or ["no output"]
    return {"model": model, "runtime": runtime, "batch": batch, "error": errors[-1][:200]}


@click.command()
@click.option("--models", default=",".join(DEFAULT_MODELS), show_default=True,
              help="Comma-separated names from static_runtime.models.MODELS.")
@click.option("--batch", default=1, show_default=True)
@click.option("--calls", default=300, show_default=True,
              help="Steady-state calls measured per (model, runtime).")
@click.option("--worker", default=None, hidden=True)
@click.option("--json-out", default=str(RESULTS / "memory.json"), show_default=True)
def main(models: str, batch: int, calls: int, worker: str | None, json_out: str) -> None:
    """Arena size and steady-state memory behaviour of every runtime, per model."""
    if worker:
        model, runtime = worker.split(":")
        print(json.dumps(globals()["worker"](model, runtime, batch, calls)))
        return
    from rich.console import Console
    from rich.progress import track
    from rich.table import Table

    rows = []
    pairs = [(m, r) for m in models.split(",") for r in RUNTIMES]
    for model, runtime in track(pairs, description="measuring (fresh process each)"):
        rows.append(run_isolated(model, runtime, batch, calls))
    Path(json_out).parent.mkdir(parents=True, exist_ok=True)
    Path(json_out).write_text(json.dumps(rows, indent=2))

    table = Table(title=f"Memory at batch {batch}, 1 thread ({calls} steady-state calls); "
                        "page faults are minor faults per call")
    for col in ("model", "arena", "lower bound", "arena / LB", "C++ SR managed",
                "faults eager", "faults TS", "faults C++ SR", "faults ours",
                "peak RSS eager", "peak RSS TS", "peak RSS C++ SR", "peak RSS ours"):
        table.add_column(col, justify="right")
    by = {(r["model"], r["runtime"]): r for r in rows}
    kib = lambda n: "—" if n is None else f"{n / 1024:.1f} KiB"
    mib = lambda n: "—" if n is None else f"{n / 2**20:.1f} MiB"
    for model in models.split(","):
        ours = by[(model, "static_runtime")]
        cpp = by[(model, "pytorch_static_runtime")]
        faults = [by[(model, r)].get("minor_faults_per_call") for r in RUNTIMES]
        ratio = (f"{ours['arena_bytes'] / ours['lower_bound_bytes']:.3f}"
                 if ours.get("lower_bound_bytes") else "—")
        table.add_row(
            model, kib(ours.get("arena_bytes")), kib(ours.get("lower_bound_bytes")), ratio,
            ("refused" if "error" in cpp else "n/a" if cpp.get("cpp_managed_bytes") is None
             else kib(cpp["cpp_managed_bytes"])),
            *[("—" if f is None else f"{f:.2f}") for f in faults],
            *[mib(by[(model, r)].get("peak_rss_bytes")) for r in RUNTIMES])
    console = Console(width=180)
    console.print(table)
    for r in rows:
        if "error" in r:
            console.print(f"[yellow]{r['model']} / {r['runtime']}: {r['error']}")


if __name__ == "__main__":
    main()
