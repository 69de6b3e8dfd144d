"""``demo`` and ``bench``: runtimes side by side on one model — outputs, latency, memory."""

from __future__ import annotations

import json
import math
import sys
import time
from typing import Any

import click
import torch
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from static_runtime import compare
from static_runtime.cli.common import (
    CLIError,
    batched_specs,
    console_for,
    example_inputs,
    format_bytes,
    input_options,
    load_module,
    one_line,
    run_first_call,
    set_threads,
    threads_option,
)
from static_runtime.cli.inputs import describe_inputs
from static_runtime.compare import files as compare_files
from static_runtime.frontend.export import is_pt2
from static_runtime.runtime.binding import ArgumentError

PEER_TITLES = {
    "eager": "eager PyTorch",
    "torchscript": "TorchScript",
    "torchscript_frozen": "TorchScript, frozen",
    "pytorch_static_runtime": "PyTorch C++ Static Runtime",
    "onnxruntime": "ONNX Runtime",
    "torch_compile": "torch.compile (inductor)",
    "static_runtime": "static_runtime (ours)",
    "static_runtime_untuned": "static_runtime, untuned (ours)",
}

#: Peers whose outputs differing from the reference's is reported, not an error of the
#: command (which fails when a runtime meant to be exact disagrees): ONNX Runtime's fused
#: kernels and Inductor's generated loops sum in other orders than ATen's.
APPROXIMATE = ("onnxruntime", "torch_compile")
#: Peers whose memory PyTorch's allocator does not see (the table shows "—")
UNSEEN_MEMORY = ("onnxruntime",)

MEMORY_NOTE = ("memory/call: the most tensor bytes live during a steady-state call (PyTorch's "
               "CPU allocator, seen through torch.profiler's memory events; outputs included, "
               "weights not; ONNX Runtime's own allocator is not seen) plus the tensor bytes a "
               "runtime holds between calls (held: ours, the arena). Setup: building the "
               "runtime from the model (ONNX Runtime: the export and the session; "
               "torch.compile: compiling, which happens in the first call).")


def _measure(runners: list[compare.Runner], *, reference: str, repeats: int, calls: int,
             warmup: int, progress: Any = None) -> list[dict[str, Any]]:
    """Agreement with the reference, µs per call and memory of every runner, as rows."""
    agree = compare.outputs_agree(runners, reference=reference)
    errors = compare.output_errors(runners, reference=reference)
    timings = compare.time_runners(runners, repeats=repeats, calls=calls, warmup=warmup,
                                   progress=progress)
    ours = timings.get("static_runtime")
    # ONNX Runtime allocates outside PyTorch's allocator, where the profiler cannot see it
    memory = {r.name: compare.measure_memory(r) for r in runners
              if not r.note and r.name not in UNSEEN_MEMORY}
    ours_mem = memory.get("static_runtime")
    rows = []
    for r in runners:
        row: dict[str, Any] = {"name": r.name, "title": PEER_TITLES.get(r.name, r.name),
                               "note": r.note or None, "caveats": list(r.caveats)}
        if r.details.get("exporter"):
            row["onnx_exporter"] = r.details["exporter"]
        if not r.note:
            t = timings[r.name].median_us
            row.update(
                us_per_call=t, samples_us=timings[r.name].samples_us,
                ours_over_this_time=ours.median_us / t if ours else None,
                setup_seconds=r.setup_seconds, first_call_seconds=r.first_call_seconds,
                peak_bytes=None, held_bytes=None, total_bytes=None, allocated_bytes=None,
                allocations=None, ours_over_this_memory=None,
                agrees=agree[r.name], max_abs_error=errors[r.name])
            m = memory.get(r.name)
            if m is not None:
                row.update(
                    peak_bytes=m.peak_bytes, held_bytes=m.held_bytes,
                    total_bytes=m.total_bytes, allocated_bytes=m.allocated_bytes,
                    allocations=m.allocations,
                    ours_over_this_memory=(ours_mem.total_bytes / m.total_bytes
                                           if ours_mem and m.total_bytes else None))
        rows.append(row)
    return rows


def _ratio(x: float | None) -> str:
    return "—" if x is None or not math.isfinite(x) else f"{x:.2f}"


def _table(rows: list[dict[str, Any]], title: str, reference: str) -> Table:
    table = Table(title=title, title_justify="left")
    for col in ("runtime", "µs/call", "ours÷this", "memory/call", "held", "ours÷this",
                "setup s", f"= {reference}"):
        table.add_column(col, justify="left" if col == "runtime" else "right", no_wrap=True)
    for row in rows:
        if row["note"]:
            table.add_row(row["title"], "—", "—", "—", "—", "—", "—", "—")
            continue
        ok = {True: "yes", False: "[red]NO[/red]", None: "—"}[row["agrees"]]
        unseen = row["total_bytes"] is None
        table.add_row(row["title"], f"{row['us_per_call']:.1f}",
                      _ratio(row["ours_over_this_time"]),
                      "—" if unseen else format_bytes(row["total_bytes"]),
                      "—" if unseen else format_bytes(row["held_bytes"]) if row["held_bytes"]
                      else "0",
                      _ratio(row["ours_over_this_memory"]), f"{row['setup_seconds']:.3f}", ok)
    return table


def _notes(rows: list[dict[str, Any]]) -> list[str]:
    """One line per peer that cannot run the model (why), per caveat of one that can, and
    per approximate peer whose outputs differ from the reference's."""
    lines = []
    for r in rows:
        if r["note"]:
            lines.append(f"{r['title']} cannot run the model: {r['note']}")
            continue
        lines += [f"{r['title']}: {c}" for c in r.get("caveats", [])]
        if r["name"] in APPROXIMATE and r.get("agrees") is False:
            lines.append(f"{r['title']}: outputs differ from the reference's (max |Δ| "
                         f"{r['max_abs_error']})")
    return lines


def _progress(console: Console) -> Progress:
    return Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                    TimeElapsedColumn(), console=console, transient=True)


def _disagreement(rows: list[dict[str, Any]]) -> list[str]:
    return [r["title"] for r in rows
            if r.get("agrees") is False and r["name"] not in APPROXIMATE]


# --------------------------------------------------------------------------- demo


@click.command()
@click.option("--model", "model_name", default="dlrm", show_default=True,
              help="Built-in model to run (see static_runtime.models.MODELS).")
@click.option("--batch", default=1, show_default=True, help="Batch size of the example inputs.")
@click.option("--repeats", default=15, show_default=True,
              help="Timing samples per runtime (the median is shown).")
@click.option("--calls", default=50, show_default=True, help="Calls per timing sample.")
@click.option("--warmup", default=20, show_default=True, help="Calls before timing.")
@threads_option
@click.option("--json", "as_json", is_flag=True, help="Print the results as JSON instead.")
def demo(model_name: str, batch: int, repeats: int, calls: int, warmup: int, threads: int,
         as_json: bool) -> None:
    """Run a built-in model (by default a DLRM-style recommendation model; nothing is
    downloaded) through eager PyTorch, TorchScript, PyTorch's C++ Static Runtime and
    static_runtime; check that the outputs agree with eager and show latency and memory
    side by side, with ratios."""
    from static_runtime.models import MODELS

    if model_name not in MODELS:
        raise click.BadParameter(f"unknown model {model_name!r}; choose from "
                                 f"{', '.join(sorted(MODELS))}", param_hint="--model")
    _positive(batch=batch, repeats=repeats, calls=calls)
    set_threads(threads)
    spec = MODELS[model_name]
    model, inputs = spec.build(), spec.example_inputs(batch)
    console = console_for(as_json)
    heading = (f"{spec.name} ({spec.description}), batch {batch}, {threads} thread(s), "
               f"torch {torch.__version__}")
    if not as_json:
        console.print(f"[bold]{heading}[/bold]")
    with console.status("preparing the runtimes..."):
        runners = compare.make_runners(model, inputs)
    with _progress(console) as bar:
        task = bar.add_task("timing", total=repeats)
        rows = _measure(runners, reference="eager", repeats=repeats, calls=calls,
                        warmup=warmup, progress=lambda k, t=task: bar.advance(t))
    if as_json:
        click.echo(json.dumps({"model": spec.name, "batch": batch, "threads": threads,
                               "torch": torch.__version__, "reference": "eager",
                               "runners": rows}, indent=2))
    else:
        console.print(_table(rows, f"median of {repeats} samples × {calls} calls; ours ÷ this "
                             "below 1: ours is faster (smaller)", "eager"))
        for note in _notes(rows):
            console.print(note, markup=False)
        console.print(f"[dim]{MEMORY_NOTE}[/dim]")
    bad = _disagreement(rows)
    if bad:
        click.echo(f"error: outputs differ from eager PyTorch's: {', '.join(bad)}", err=True)
        sys.exit(1)


def _positive(**values: int) -> None:
    for name, v in values.items():
        if v < 1:
            raise click.BadParameter(f"must be at least 1, got {v}", param_hint=f"--{name}")


# --------------------------------------------------------------------------- bench


@click.command()
@click.argument("model", type=click.Path(dir_okay=True))
@input_options
@click.option("--batch-sizes", default="1", show_default=True,
              help="Comma-separated batch sizes, substituted for B in --input shapes.")
@click.option("--repeats", default=15, show_default=True,
              help="Timing samples per runtime and batch size (the median is shown).")
@click.option("--runs", default=50, show_default=True, help="Calls per timing sample.")
@click.option("--warmup", default=20, show_default=True, help="Calls before timing.")
@threads_option
@click.option("--untuned", is_flag=True,
              help="Also ours with the defaults before kernels were measured: ATen's kernels "
                   "by fixed rules (kernel_choice='default') and a conv net's activations "
                   "in eager's layout (channels_last=False).")
@click.option("--json", "as_json", is_flag=True, help="Print the results as JSON instead.")
def bench(model: str, input_specs: tuple[str, ...], inputs_file: str | None, batch_sizes: str,
          repeats: int, runs: int, warmup: int, threads: int, untuned: bool,
          as_json: bool) -> None:
    """Benchmark MODEL against the runtimes it can run on; show latency and memory side by
    side, with ratios.

    A TorchScript archive (.pt): the TorchScript interpreter (the reference for outputs),
    frozen TorchScript, PyTorch's C++ Static Runtime, ONNX Runtime (on an ONNX export of the
    archive), torch.compile (which refuses TorchScript: the table says so) and
    static_runtime; eager PyTorch is not among them: an archive holds no Python code.

    A torch.export archive (.pt2, torch.export.save): eager PyTorch on the program
    (torch.export.load(path).module(), the reference), ONNX Runtime (on an ONNX export of
    the program), torch.compile of the program's module, and static_runtime; without
    --input or --inputs-file, the example inputs the program was exported with.

    ONNX Runtime runs when onnxruntime is installed (pip install -e '.[bench]'); a model it
    cannot take (an export that fails) is one line under the table."""
    _positive(repeats=repeats, runs=runs)
    set_threads(threads)
    try:
        sizes = [int(b) for b in batch_sizes.split(",") if b.strip()]
    except ValueError:
        raise click.BadParameter(f"expected comma-separated integers, got {batch_sizes!r}",
                                 param_hint="--batch-sizes") from None
    if not sizes or min(sizes) < 1:
        raise click.BadParameter("batch sizes must be at least 1", param_hint="--batch-sizes")
    if sizes != [1] and not batched_specs(input_specs):
        raise CLIError("--batch-sizes needs a B dimension in an --input shape (e.g. "
                       "--input Bx64:float32)")
    exported = is_pt2(model)
    reference, make_runners = (("eager", compare_files.make_exported_runners) if exported
                               else ("torchscript", compare_files.make_archive_runners))
    console = console_for(as_json)
    with console.status("preparing the model..."):
        start = time.perf_counter()
        mod = load_module(model)
        load_seconds = time.perf_counter() - start
    # Every batch size is checked before any is timed: an exported program may accept only
    # the batch it was exported with (or a range), and the binder says which.
    inputs = [(batch, _inputs_for_batch(mod, model, input_specs, inputs_file, batch,
                                        others_accepted=k > 0))
              for k, batch in enumerate(sizes)]
    results = []
    from_program = exported and not input_specs and not inputs_file
    for batch, args in inputs:
        run_first_call(mod, args)
        if not as_json:
            origin = " (the example inputs the program was exported with)" if from_program else ""
            console.print(f"[bold]{model}[/bold]: inputs {describe_inputs(args)}{origin}, "
                          f"{threads} thread(s), torch {torch.__version__}")
        # A .pt2: ours is prepared again, so that its setup, like eager's, is timed after the
        # process has loaded the archive once (the first load pays torch.export's one-time
        # imports, a second or more, which would otherwise be charged to ours).
        with console.status("preparing the runtimes..."):
            runners = make_runners(model, args, module=None if exported else mod,
                                   untuned=untuned)
        for r in runners:
            if r.name == "static_runtime" and not exported:  # built above: the module's
                r.setup_seconds = load_seconds
        with _progress(console) as bar:
            task = bar.add_task(f"timing, batch {batch}", total=repeats)
            rows = _measure(runners, reference=reference, repeats=repeats, calls=runs,
                            warmup=warmup, progress=lambda k, t=task: bar.advance(t))
        results.append({"batch": None if from_program else batch,
                        "inputs": describe_inputs(args), "runners": rows})
        if not as_json:
            console.print(_table(rows, f"median of {repeats} samples × {runs} calls; ours ÷ "
                                 "this below 1: ours is faster (smaller)",
                                 "eager" if exported else "TorchScript"))
            for note in _notes(rows):
                console.print(note, markup=False)
    if exported:
        note = ("TorchScript and PyTorch's C++ Static Runtime cannot run an exported program "
                "(.pt2); outputs are checked against eager PyTorch, "
                "torch.export.load(path).module()")
    else:
        note = ("eager PyTorch is not available from a TorchScript archive (it holds no "
                "Python code); outputs are checked against the TorchScript interpreter")
    if as_json:
        click.echo(json.dumps({"model": model,
                               "format": "torch.export" if exported else "torchscript",
                               "threads": threads, "torch": torch.__version__,
                               "reference": reference, "notes": [note, MEMORY_NOTE],
                               "results": results}, indent=2))
    else:
        console.print(f"[dim]{note}.\n{MEMORY_NOTE}[/dim]")
    bad = [t for res in results for t in _disagreement(res["runners"])]
    if bad:
        against = "eager PyTorch's" if exported else "the TorchScript interpreter's"
        click.echo(f"error: outputs differ from {against}: {', '.join(sorted(set(bad)))}",
                   err=True)
        sys.exit(1)


def _inputs_for_batch(mod: Any, model: str, input_specs: tuple[str, ...],
                      inputs_file: str | None, batch: int, *, others_accepted: bool) -> tuple:
    """The inputs for one batch size; when earlier ones were accepted, a refusal is the
    batch size's (a program exported with a static batch, or a batch outside its range)."""
    try:
        return example_inputs(mod, input_specs, inputs_file, batch, model=model)
    except ArgumentError as e:
        if not others_accepted:
            raise
        raise CLIError(f"batch size {batch} is refused: {one_line(e)}") from e
