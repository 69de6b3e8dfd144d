"""The traffic benchmark's report: per workload, latency percentiles of every peer over the
trace, the cost of each new size, and our runtime's plan-cache figures."""

from __future__ import annotations

import math
from typing import Any

#: How the tables name each peer.
SHORT = {"eager": "eager", "torchscript": "TorchScript", "pytorch_static_runtime": "C++ SR",
         "onnxruntime": "ORT", "static_runtime": "ours", "static_runtime_export": "ours (export)",
         "static_runtime_cache8": "ours (cache 8)",
         "static_runtime_layout_first": "ours (layout first)",
         "static_runtime_untuned": "ours (untuned)"}


def _fmt(x: float | None, spec: str = ".0f") -> str:
    return "—" if x is None or (isinstance(x, float) and math.isnan(x)) else format(x, spec)


def print_workload(console: Any, name: str, result: dict) -> None:
    from rich.table import Table

    table = Table(title=f"{name}: {result['description']} — µs per call; new sizes in ms")
    for col in ("peer", "mean", "p50", "p99", "p99/p50", "p99 ÷size", "÷ best", "1st", "2nd",
                "steady",
                "1st/steady", "extra", "agrees"):
        table.add_column(col, justify="left" if col == "peer" else "right")
    for peer, e in result["peers"].items():
        if e.get("note"):
            table.add_row(SHORT[peer], f"[dim]cannot run: {e['note'][:90]}[/]")
            continue
        n = e["new_size"]
        table.add_row(SHORT[peer], _fmt(e["mean_us"]), _fmt(e["p50_us"]), _fmt(e["p99_us"]),
                      _fmt(e["p99_us"] / e["p50_us"], ".2f"), _fmt(e["p99_of_size_ratio"], ".2f"),
                      _fmt(e.get("over_best"), ".2f"),
                      _fmt(n["first_ms"], ".2f"), _fmt(n["second_ms"], ".2f"),
                      _fmt(n["steady_ms"], ".2f"), _fmt(n["first_over_steady"], ".1f"),
                      _fmt(n["extra_ms"], ".1f"), "yes" if e.get("agrees", True) else "[red]no")
    console.print(table)
    for peer, e in result["peers"].items():
        o = e.get("ours")
        if o is None:
            continue
        arena = (f"arena {o['arena_bytes'] / 1024:.0f} KiB, lower bound "
                 f"{o['lower_bound_bytes'] / 1024:.0f} KiB at the largest size"
                 if "arena_bytes" in o else o.get("memory_plan", ""))
        console.print(f"  {SHORT[peer]}: over {o['replays']} replays layout cache "
                      f"{o['layout_hits']} hits / {o['layout_misses']} misses; specialised "
                      f"{o['specialize_replays']}× ({o['specialize_s_replays']:.1f} s), code "
                      f"generated {o['generate_replays']}× ({o['generate_s_replays']:.1f} s; "
                      f"on the request path {o.get('generate_on_request_replays', 0)}×) "
                      f"[{o['specialize_total']}× / {o['generate_total']}× in all]; {arena}")
    for peer, e in result["peers"].items():
        for d in e.get("disagreements", []):
            console.print(f"  [red]{SHORT[peer]} differs from eager[/]: {d}")
