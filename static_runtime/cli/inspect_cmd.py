"""``inspect``: what preparation did to a model, which implementation each node got, and the
memory plan."""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import click
from rich.table import Table

import static_runtime as sr
from static_runtime.cli.common import (
    CLIError,
    console_for,
    example_inputs,
    input_options,
    kernel_choice_option,
    load_module,
    recorded_inputs,
    run_first_call,
    signature_of,
)
from static_runtime.cli.inputs import describe_inputs
from static_runtime.frontend import import_model
from static_runtime.frontend.export import is_pt2
from static_runtime.ir.graph import Graph
from static_runtime.ir.verifier import verify
from static_runtime.ops.registry import evaluator
from static_runtime.passes.pipeline import run_passes


@dataclass
class PassRecord:
    """What one pass did: node counts (nested blocks included) before and after, and the
    node kinds whose counts went down (removed) or up (added)."""

    name: str
    changed: bool
    nodes_before: int
    nodes_after: int
    removed: dict[str, int] = field(default_factory=dict)
    added: dict[str, int] = field(default_factory=dict)


def _kinds(graph: Graph) -> Counter[str]:
    return Counter(n.kind for n in graph.walk())


def pass_report(model: Any, options: sr.StaticModuleOptions) -> tuple[int, list[PassRecord]]:
    """Import ``model`` again and run the passes as ``prepare`` does, recording each pass's
    effect; returns the imported node count and one record per pass that ran."""
    graph = import_model(model, freeze=options.freeze)
    verify(graph)
    records: list[PassRecord] = []
    state = {"kinds": _kinds(graph)}
    imported = sum(state["kinds"].values())

    def observe(name: str, changed: bool, g: Graph) -> None:
        before, after = state["kinds"], _kinds(g)
        records.append(PassRecord(
            name, changed, sum(before.values()), sum(after.values()),
            removed=dict(sorted((before - after).items())),
            added=dict(sorted((after - before).items()))))
        state["kinds"] = after

    run_passes(graph, options.passes_enabled(), evaluate=evaluator,
               verify_each=options.verify_passes, observer=observe,
               measured_kernels=options.kernel_choice == "measure")
    return imported, records


def _counts(d: dict[str, int], limit: int = 4) -> str:
    items = sorted(d.items(), key=lambda kv: (-kv[1], kv[0]))
    text = ", ".join(f"{k.split('::')[-1] if '::' in k else k} ×{n}" for k, n in items[:limit])
    return text + (f", +{len(items) - limit} more" if len(items) > limit else "")


@click.command()
@click.argument("model", type=click.Path(dir_okay=True))
@input_options
@click.option("--batch", default=1, show_default=True, help="B in --input shapes.")
@click.option("--plot-memory", type=click.Path(dir_okay=False),
              help="Write a PNG of the arena (needs inputs: memory is planned per input "
                   "signature).")
@click.option("--graph/--no-graph", "show_graph", default=True, show_default=True,
              help="Print the prepared graph.")
@kernel_choice_option
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON instead.")
def inspect(model: str, input_specs: tuple[str, ...], inputs_file: str | None, batch: int,
            plot_memory: str | None, show_graph: bool, kernel_choice: str,
            as_json: bool) -> None:
    """Show what static_runtime makes of MODEL (a TorchScript archive, .pt, or a torch.export
    archive, .pt2): its signature, what each graph pass changed, the prepared graph in the
    canonical text form, each node's implementation tier, and — given inputs
    (--input/--inputs-file; a .pt2 gives the example inputs it was exported with) — the
    memory plan: summary, timeline, and with --plot-memory a picture of the arena."""
    console = console_for(as_json)
    mod = load_module(model, sr.StaticModuleOptions(kernel_choice=kernel_choice))
    options = mod.options
    imported, records = pass_report(model, options)
    plan = None
    args = None
    if input_specs or inputs_file:
        args = example_inputs(mod, input_specs, inputs_file, batch)
    elif is_pt2(model):
        try:
            args = recorded_inputs(model)
        except CLIError:  # keyword example inputs, which the command cannot pass: no plan
            args = None
    if args is not None:
        run_first_call(mod, args)
        plan = mod.memory_plan()
        if plot_memory:
            plan.plot(plot_memory)
    elif plot_memory:
        raise click.UsageError("--plot-memory needs the model's inputs (--input or "
                               "--inputs-file): memory is planned per input signature")
    if as_json:
        click.echo(json.dumps({
            "model": model, "signature": signature_of(mod), "imported_nodes": imported,
            "passes": [r.__dict__ for r in records], "graph": str(mod.graph),
            "tiers": mod.tier_counts(), "nodes": mod.describe().splitlines()[:-1],
            "inputs": describe_inputs(args) if args is not None else None,
            "memory_plan": None if plan is None else {
                "summary": plan.summary(), "arena_bytes": plan.arena_bytes,
                "lower_bound_bytes": plan.lower_bound_bytes,
                "unplanned_bytes": plan.unplanned_bytes, "tensors": len(plan),
                "algorithm": plan.algorithm, "timeline": plan.timeline()},
            "plot": plot_memory}, indent=2))
        return
    console.print(f"[bold]{model}[/bold]: {signature_of(mod)}")
    table = Table(title=f"graph passes ({imported} nodes imported, nested blocks included)",
                  title_justify="left")
    for col, just in (("pass", "left"), ("changed", "center"), ("nodes", "right"),
                      ("removed", "left"), ("added", "left")):
        table.add_column(col, justify=just)
    for r in records:
        nodes = (f"{r.nodes_before} → {r.nodes_after}" if r.nodes_before != r.nodes_after
                 else str(r.nodes_after))
        table.add_row(r.name, "yes" if r.changed else "", nodes, _counts(r.removed),
                      _counts(r.added))
    console.print(table)
    if show_graph:
        console.rule("prepared graph")
        console.print(str(mod.graph), markup=False, highlight=False)
    console.rule("nodes: implementation tier")
    console.print(mod.describe(), markup=False, highlight=False)
    console.rule("memory plan")
    if plan is None:
        console.print("no memory plan yet: memory is planned per input signature; give the "
                      "inputs (--input SHAPE:DTYPE ... or --inputs-file FILE) to see it")
        return
    console.print(f"inputs {describe_inputs(args)}:", markup=False)
    console.print(plan.timeline(), markup=False, highlight=False)
    if plot_memory:
        console.print(f"plot: {plot_memory}")
