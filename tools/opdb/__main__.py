"""``python -m tools.opdb``: PyTorch's operator database through our runtime (see __init__)."""

from __future__ import annotations

import json
import re
import sys
import tempfile
import time
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import click
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from tools.opdb.check import FAILURES, Status

_COLUMNS = (Status.PASS, *FAILURES, Status.SKIP)


def summarize(records: list[dict[str, Any]], options: list[str]) -> dict[str, Any]:
    """Counts per option (cases = sample × variant), OpInfos, grouped skip reasons, failures.

    A record of option ``*`` (an OpInfo skipped, or crashed generating its samples) is one
    OpInfo-level entry; it counts under ``opinfos``, not under the cases of an option.
    """
    unique: dict[str, dict[str, Any]] = {}
    for r in records:
        if r["status"] != "generated":
            unique.setdefault(r["key"], r)
    records = list(unique.values())
    per_option: dict[str, Counter] = {o: Counter() for o in options}
    skips: dict[str, Counter] = defaultdict(Counter)
    ops_all = {r["op"] for r in records}
    ops_skipped = {r["op"] for r in records if r["option"] == "*"}
    for r in records:
        option = r["option"]
        if option == "*":
            if r["status"] == Status.SKIP.value:
                skips["(whole OpInfo)"][_reason(r["message"])] += 1
            continue
        per_option[option][r["status"]] += 1
        per_option[option]["cases"] += 1
        if r["status"] == Status.PASS.value and r.get("both_raise"):
            per_option[option]["pass_both_raise"] += 1
        if r["status"] == Status.SKIP.value:
            skips[option][_reason(r["message"])] += 1
    failures = [r for r in records if r["status"] in {s.value for s in FAILURES}]
    return {
        "opinfos": len(ops_all), "opinfos_skipped": len(ops_skipped),
        "opinfos_run": len(ops_all - ops_skipped),
        "per_option": {o: dict(c) for o, c in per_option.items()},
        "skip_reasons": {o: dict(c.most_common()) for o, c in skips.items()},
        "failures": failures,
    }


def _reason(message: str) -> str:
    """A skip message without its particulars, for grouping."""
    return re.sub(r"\s*\((?:[^()]|\([^()]*\))*\)", "", message).strip()[:120]


def print_summary(summary: dict[str, Any], seconds: float, console: Console) -> None:
    """The summary table, skip reasons and every failure."""
    table = Table(title=f"op_db: {summary['opinfos']} OpInfos "
                        f"({summary['opinfos_skipped']} skipped whole), {seconds:.0f} s")
    table.add_column("option")
    table.add_column("cases", justify="right")
    for s in _COLUMNS:
        table.add_column(s.value.replace("_", " "), justify="right")
    for option, c in summary["per_option"].items():
        cells = [str(c.get(s.value, 0)) for s in _COLUMNS]
        cells[0] += f" ({c.get('pass_both_raise', 0)} both raise)"
        table.add_row(option, str(c.get("cases", 0)), *cells)
    console.print(table)
    for where, reasons in summary["skip_reasons"].items():
        console.print(f"[bold]skipped[/bold] {where}:")
        for reason, n in reasons.items():
            console.print(f"  {n:5d}  {reason}")
    for r in summary["failures"]:
        where = f"sample {r.get('sample')} {r.get('variant')} [{r['option']}]" \
            if "sample" in r else f"[{r['option']}]"
        console.print(f"[red]{r['status'].upper()}[/red] {escape(r['op'])} {escape(where)}: "
                      f"{escape(r['message'])}", highlight=False)
        if r.get("sample_text"):
            console.print(f"    {escape(r['sample_text'])}", highlight=False)


@click.command()
@click.option("--ops", default="", help="Comma-separated OpInfo names (full or base); all if empty.")
@click.option("--options", "option_names", default="default,fused", show_default=True,
              help="Option sets: default, fused (fusion_compiler='inductor').")
@click.option("--jobs", default=2, show_default=True,
              help="Worker subprocesses at a time (each uses one thread).")
@click.option("--chunk", default=60, show_default=True, help="OpInfos per worker subprocess.")
@click.option("--samples", default=3, show_default=True, help="Samples per OpInfo.")
@click.option("--variants", "variant_names", default="returned,consumed", show_default=True,
              help="returned, consumed (stacked), chained (four neg follow: with the fused "
                   "option, Inductor compiles an element-wise op with them).")
@click.option("--timeout", default=60.0, show_default=True,
              help="Seconds one unit may take before its worker is killed (a crash).")
@click.option("--out", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Write the JSON report here.")
@click.option("--worker", type=click.Path(dir_okay=False, path_type=Path), default=None,
              hidden=True)
def main(ops: str, option_names: str, jobs: int, chunk: int, samples: int, variant_names: str,
         timeout: float, out: Path | None, worker: Path | None) -> None:
    """Run PyTorch's operator database through static_runtime against TorchScript."""
    names = [n for n in ops.split(",") if n]
    options = [o for o in option_names.split(",") if o]
    variants = [v for v in variant_names.split(",") if v]
    from tools.opdb.cases import VARIANTS
    if set(variants) - set(VARIANTS):
        raise click.BadParameter(f"unknown variants {sorted(set(variants) - set(VARIANTS))}",
                                 param_hint="--variants")
    from tools.opdb.runner import OPTION_SETS, run_all, select
    from tools.opdb.runner import worker as run_worker
    unknown = set(options) - set(OPTION_SETS)
    if unknown:
        raise click.BadParameter(f"unknown option sets {sorted(unknown)}", param_hint="--options")
    if worker is not None:
        run_worker(worker, names, options, samples, variants)
        return
    from tools.opdb.cases import full_name, op_db
    try:
        chosen = [full_name(op) for op in select(op_db(), names)]
    except ValueError as e:
        raise click.BadParameter(str(e), param_hint="--ops") from e
    console = Console(width=150)
    start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="opdb-") as tmp:
        records = run_all(chosen, options, samples, jobs, chunk, timeout, Path(tmp),
                          progress=lambda s: console.print(s, style="dim", highlight=False),
                          variants=variants)
    seconds = time.perf_counter() - start
    summary = summarize(records, options)
    print_summary(summary, seconds, console)
    if out is not None:
        out.write_text(json.dumps({"seconds": seconds, "samples": samples, "jobs": jobs,
                                   "variants": variants, "options": options,
                                   "summary": summary, "records": records}, indent=1))
    sys.exit(1 if summary["failures"] else 0)


if __name__ == "__main__":
    main()
