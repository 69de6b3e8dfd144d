"""``profile``: where the time goes, per node and per node kind."""

from __future__ import annotations

import dataclasses
import json
import warnings
from collections import defaultdict
from pathlib import Path
from typing import Any

import click
import torch
from rich.table import Table

import static_runtime as sr
from static_runtime.cli.charts import node_kind_chart
from static_runtime.cli.common import (
    console_for,
    example_inputs,
    format_bytes,
    input_options,
    kernel_choice_option,
    load_module,
    run_first_call,
    set_threads,
    threads_option,
)
from static_runtime.cli.inputs import describe_inputs
from static_runtime.compare import ops as compare_ops
from static_runtime.frontend.export import is_pt2, load_pt2
from static_runtime.runtime.metrics import measure_overhead
from static_runtime.runtime.plan import Control


def node_rows(mod: sr.StaticModule, m: sr.IndividualMetrics) -> list[dict[str, Any]]:
    """One row per top-level node, in program order, with its time and managed bytes."""
    try:
        plan = mod.memory_plan()
    except RuntimeError:
        plan = None
    total = sum(m.time_per_node) or 1.0
    rows = []
    for k, (pn, ms) in enumerate(zip(mod.plan.block.nodes, m.time_per_node)):
        name = pn.node.outputs[0].name if pn.node.outputs else None
        managed = (plan.aligned_size(name)
                   if plan is not None and pn.managed and name in plan else 0)
        tier = "control flow" if pn.control is not Control.NONE else pn.tier.value
        rows.append({"index": k, "kind": pn.kind, "tier": tier,
                     "implementation": (pn.impl.label.split(" (")[0]
                                            if pn.control is Control.NONE else ""),
                     "us": ms * 1e3, "percent": 100.0 * ms / total, "managed_bytes": managed,
                     "source": pn.node.source or ""})
    return rows


def kind_rows(nodes: list[dict[str, Any]]) -> list[dict[str, Any]]:
    by_kind: dict[str, dict[str, Any]] = defaultdict(
        lambda: {"nodes": 0, "us": 0.0, "percent": 0.0, "managed_bytes": 0, "tiers": set()})
    for row in nodes:
        k = by_kind[row["kind"]]
        k["nodes"] += 1
        k["us"] += row["us"]
        k["percent"] += row["percent"]
        k["managed_bytes"] += row["managed_bytes"]
        k["tiers"].add(row["tier"])
    out = []
    for kind, k in by_kind.items():
        tiers = sorted(k.pop("tiers"))
        out.append({"kind": kind, **k, "tier": tiers[0] if len(tiers) == 1 else "mixed",
                    "tiers": tiers})
    return sorted(out, key=lambda r: -r["us"])


@click.command()
@click.argument("model", type=click.Path(dir_okay=True))
@input_options
@click.option("--batch", default=1, show_default=True, help="B in --input shapes.")
@click.option("--runs", default=100, show_default=True, help="Profiled calls (times averaged).")
@click.option("--warmup", default=10, show_default=True, help="Calls before profiling.")
@click.option("--executor", type=click.Choice(["codegen", "interpreter"]), default="codegen",
              show_default=True, help="The executor to profile.")
@click.option("--top", default=15, show_default=True, help="How many of the slowest nodes to list.")
@click.option("--chart", type=click.Path(dir_okay=False),
              help="Write a PNG bar chart of time per node kind.")
@click.option("--overhead/--no-overhead", default=True, show_default=True,
              help="Measure what the per-node clock readings cost (about a second).")
@click.option("--against", type=click.Choice(["cpp"]), default=None,
              help="Compare per node kind with PyTorch's C++ Static Runtime instead (its "
                   "benchmark_individual_ops on the same inputs; TorchScript's profile where "
                   "it refuses the model, eager PyTorch's for a .pt2).")
@click.option("--repeats", default=5, show_default=True,
              help="With --against: alternated blocks the --runs are split into.")
@threads_option
@kernel_choice_option
@click.option("--json", "as_json", is_flag=True, help="Print the profile as JSON instead.")
def profile(model: str, input_specs: tuple[str, ...], inputs_file: str | None, batch: int,
            runs: int, warmup: int, executor: str, top: int, chart: str | None,
            overhead: bool, against: str | None, repeats: int, threads: int,
            kernel_choice: str, as_json: bool) -> None:
    """Profile MODEL (a TorchScript archive, .pt, or a torch.export archive, .pt2) per node:
    time per node and per node kind, each node's implementation tier (out variant / native /
    fallback), its share of the time and the arena bytes it writes; setup, first-call,
    memory setup and release times as PyTorch's benchmark_individual_ops reports them, and
    what the profiling itself costs. A .pt2 runs on the example inputs it was exported with
    unless --input or --inputs-file is given.

    With --against cpp: one table of node kinds, ours against PyTorch's C++ Static Runtime
    (instances, µs per instance, the difference, and what each kind costs us per call),
    from both runtimes' benchmark_individual_ops on the same inputs, alternated in
    --repeats blocks; each kind's median over the --runs profiled runs."""
    if runs < 1:
        raise click.BadParameter("must be at least 1", param_hint="--runs")
    if repeats < 1:
        raise click.BadParameter("must be at least 1", param_hint="--repeats")
    set_threads(threads)
    console = console_for(as_json)
    mod = load_module(model, sr.StaticModuleOptions(executor=executor,
                                                    kernel_choice=kernel_choice))
    args = example_inputs(mod, input_specs, inputs_file, batch, model=model)
    run_first_call(mod, args)
    if against is not None:
        against_cpp(console, model, mod, args, warmup=warmup, runs=runs, repeats=repeats,
                    executor=executor, threads=threads, as_json=as_json)
        return
    with console.status("profiling..."):
        m = mod.benchmark_individual_ops(args, {}, warmup, runs)
    with console.status("measuring the profiler's overhead..."):
        cost = (measure_overhead(mod.runtime(), args, {}, samples=41, sample_ms=1.0,
                                 max_seconds=3.0) if overhead else None)
    nodes = node_rows(mod, m)
    kinds = kind_rows(nodes)
    if chart:
        node_kind_chart(chart, [(k["kind"], k["us"], k["percent"], k["nodes"], k["tier"])
                                for k in kinds],
                        f"Time per node kind: {Path(model).name}",
                        f"inputs {describe_inputs(args)}; {executor} executor, {threads} "
                        f"thread(s); each node timed in {runs} calls, {m.total_time * 1e3:.1f} µs per call")
    if as_json:
        metrics = dataclasses.asdict(m)
        metrics["out_nodes"] = sorted(m.out_nodes)
        click.echo(json.dumps({
            "model": model, "inputs": describe_inputs(args), "executor": executor,
            "threads": threads, "runs": runs, "metrics_ms": metrics,
            "overhead": None if cost is None else {
                **dataclasses.asdict(cost), "fraction": cost.fraction,
                "ns_per_node": cost.ns_per_node},
            "node_kinds": kinds, "nodes": nodes, "chart": chart}, indent=2))
        return
    console.print(f"[bold]{model}[/bold]: inputs {describe_inputs(args)}, {executor} "
                  f"executor, {threads} thread(s), mean of {runs} calls")
    summary = Table(title="per call", title_justify="left", show_header=False)
    summary.add_column()
    summary.add_column(justify="right")
    for label, ms in (("setup (binding the arguments)", m.setup_time),
                      ("first call (plans memory, generates code)", m.first_iter_time),
                      ("memory setup", m.memory_alloc_time),
                      ("release after the last node", m.memory_dealloc_time),
                      ("dropping the outputs", m.output_dealloc_time),
                      ("total, profiled", m.total_time)):
        summary.add_row(label, f"{ms * 1e3:.1f} µs")
    if cost is not None:
        summary.add_row("ordinary call, not profiled", f"{cost.call_ms * 1e3:.1f} µs")
        summary.add_row("profiler overhead",
                        f"{cost.fraction * 100:+.1f} % ({cost.ns_per_node:.0f} ns per node)")
    console.print(summary)
    table = Table(title="time per node kind", title_justify="left")
    for col, just in (("node kind", "left"), ("nodes", "right"), ("tier", "left"),
                      ("µs / call", "right"), ("%", "right"), ("arena bytes", "right")):
        table.add_column(col, justify=just)
    for k in kinds:
        table.add_row(k["kind"], str(k["nodes"]), ", ".join(k["tiers"]), f"{k['us']:.2f}",
                      f"{k['percent']:.1f}",
                      format_bytes(k["managed_bytes"]) if k["managed_bytes"] else "")
    console.print(table)
    slow = sorted(nodes, key=lambda r: -r["us"])[:max(top, 0)]
    if slow:
        table = Table(title=f"slowest {len(slow)} of {len(nodes)} nodes", title_justify="left")
        for col, just in (("#", "right"), ("node", "left"), ("tier", "left"),
                          ("implementation", "left"), ("µs / call", "right"), ("%", "right"),
                          ("arena bytes", "right"), ("source", "left")):
            table.add_column(col, justify=just, overflow="fold")
        for r in slow:
            table.add_row(str(r["index"]), r["kind"], r["tier"], r["implementation"],
                          f"{r['us']:.2f}", f"{r['percent']:.1f}",
                          format_bytes(r["managed_bytes"]) if r["managed_bytes"] else "",
                          r["source"])
        console.print(table)
    console.print(f"{m.out_nodes_count} of {m.total_nodes_count} top-level nodes run out "
                  f"variants; tiers of all nodes: "
                  + ", ".join(f"{n} {t}" for t, n in mod.tier_counts().items()))
    try:
        console.print(f"memory: {mod.memory_plan().summary()}")
    except RuntimeError as e:
        console.print(f"memory: {e}")
    if chart:
        console.print(f"chart: {chart}")


def _us(x: float | None, signed: bool = False) -> str:
    if x is None:
        return ""
    return f"{x:+.2f}" if signed else f"{x:.2f}"


def _n(x: float | None) -> str:
    if x is None:
        return ""
    return str(int(x)) if float(x).is_integer() else f"{x:.1f}"


def against_cpp(console: Any, model: str, mod: sr.StaticModule, args: tuple, *, warmup: int,
                runs: int, repeats: int, executor: str, threads: int, as_json: bool) -> None:
    """``profile --against cpp``: ``compare_ops.compare`` on the model file, as a table."""
    if is_pt2(model):
        program = load_pt2(model).module()
        with console.status("profiling ours and eager PyTorch, alternated..."):
            c = compare_ops.compare(mod, args, eager=program, repeats=repeats, warmup=warmup,
                                    runs=runs)
        c.note = ("PyTorch's C++ Static Runtime cannot run a torch.export program (.pt2): "
                  "compared with eager PyTorch on the program instead")
    else:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            scripted = torch.jit.load(model, map_location="cpu")
        with console.status("profiling ours and the peer, alternated..."):
            c = compare_ops.compare(mod, args, scripted=scripted, repeats=repeats,
                                    warmup=warmup, runs=runs)
    ours_total, other_total = compare_ops.totals(c.rows)
    if as_json:
        click.echo(json.dumps({"model": model, "inputs": describe_inputs(args),
                               "executor": executor, "threads": threads, **c.as_dict(),
                               "total": {"ours_us": ours_total, "other_us": other_total,
                                         "cost_us": ours_total - other_total}}, indent=2))
        return
    peer = {"pytorch_static_runtime": "C++ SR", "torchscript": "TorchScript",
            "eager": "eager"}[c.against]
    console.print(f"[bold]{model}[/bold]: inputs {describe_inputs(args)}, {executor} executor, "
                  f"{threads} thread(s); each kind's median over {runs} profiled runs, in "
                  f"{repeats} alternated blocks")
    if c.note:
        console.print(c.note)
    if c.against != "pytorch_static_runtime":
        console.print(f"{peer} is profiled with torch.autograd.profiler (top-level operator "
                      "events: one instance per operator call, so an operator in a loop or a "
                      "branch is its own row there, while our prim::If/prim::Loop rows hold "
                      "their blocks; operators without a dispatcher call unseen; the "
                      "profiler's cost included): measured differently from ours")
    table = Table(title=f"per node kind: ours against {peer}, sorted by what each costs us "
                        "per call", title_justify="left")
    for col in ("node kind", "ours n", f"{peer} n", "ours µs/n", f"{peer} µs/n", "Δ µs/n",
                "cost µs/call"):
        table.add_column(col, justify="left" if col == "node kind" else "right")
    for r in c.rows:
        kind = r.kind
        mapped = sorted(set(r.ours_kinds + r.other_kinds) - {r.kind})
        if mapped:
            kind += f" ({', '.join(mapped)})"
        if r.stands_for:
            kind += f" = {r.stands_for}"
        table.add_row(kind, _n(r.ours_instances), _n(r.other_instances),
                      _us(r.ours_us_per_instance), _us(r.other_us_per_instance),
                      _us(r.diff_us_per_instance, True), _us(r.cost_us, True))
    table.add_section()
    table.add_row("total per call", "", "", _us(ours_total), _us(other_total), "",
                  _us(ours_total - other_total, True))
    console.print(table)
    console.print("n: instances (top-level nodes; a control-flow node's time holds its "
                  "blocks). cost: ours − theirs for all instances of the kind, per call "
                  "(Δ × n where the counts agree). Kinds each runtime renames are mapped to "
                  "the operator they stand for (static_runtime.compare.ops.KIND_MAP), shown "
                  "in brackets.")
