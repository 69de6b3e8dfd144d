"""The ``static-runtime`` command (also ``python -m static_runtime``)."""

from __future__ import annotations

import sys

import click
import torch
from rich.console import Console
from rich.table import Table

from static_runtime import compare

PEER_TITLES = {
    "eager": "eager PyTorch (inference_mode)",
    "torchscript": "TorchScript (frozen)",
    "pytorch_static_runtime": "PyTorch C++ Static Runtime",
    "static_runtime": "static_runtime (ours)",
}


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
def main() -> None:
    """static_runtime: fast CPU inference for PyTorch models."""


@main.command()
@click.option("--model", "model_name", default="dlrm", show_default=True,
              help="Built-in model to run (see static_runtime.models.MODELS).")
@click.option("--batch", default=1, show_default=True, help="Batch size of the example inputs.")
@click.option("--repeats", default=15, show_default=True,
              help="Timing samples per runner (the median is shown).")
@click.option("--calls", default=50, show_default=True, help="Calls per timing sample.")
@click.option("--threads", default=1, show_default=True, help="Intra-op threads (torch).")
def demo(model_name: str, batch: int, repeats: int, calls: int, threads: int) -> None:
    """Run a built-in model through eager PyTorch, TorchScript, PyTorch's C++ Static Runtime
    and static_runtime; check the outputs agree and show latency side by side."""
    from static_runtime.models import MODELS

    console = Console()
    if model_name not in MODELS:
        raise click.BadParameter(f"unknown model {model_name!r}; choose from {sorted(MODELS)}",
                                 param_hint="--model")
    torch.set_num_threads(threads)
    spec = MODELS[model_name]
    model, inputs = spec.build(), spec.example_inputs(batch)
    console.print(f"[bold]{spec.name}[/bold], batch {batch}, {threads} thread(s), "
                  f"torch {torch.__version__}")
    runners = compare.make_runners(model, inputs)
    agree = compare.outputs_agree(runners)
    with console.status("timing..."):
        timings = compare.time_runners(runners, repeats=repeats, calls=calls)
    ours = timings.get("static_runtime")
    table = Table(title=f"{spec.name}: µs per call (median of {repeats} × {calls} calls)")
    table.add_column("runtime")
    table.add_column("µs / call", justify="right")
    table.add_column("ours ÷ this", justify="right")
    table.add_column("setup s", justify="right")
    table.add_column("output = eager", justify="center")
    for r in runners:
        if r.note:
            table.add_row(PEER_TITLES[r.name], "—", "—", "—", f"cannot run: {r.note[:60]}")
            continue
        t = timings[r.name].median_us
        ratio = f"{ours.median_us / t:.2f}" if ours else "—"
        ok = {True: "yes", False: "[red]NO[/red]", None: "—"}[agree[r.name]]
        table.add_row(PEER_TITLES[r.name], f"{t:.1f}", ratio, f"{r.setup_seconds:.3f}", ok)
    console.print(table)
    if any(v is False for v in agree.values()):
        sys.exit(1)


if __name__ == "__main__":
    main()
