"""The latency benchmark's report: the side-by-side tables of the built-in models and of the
zoo, the summaries against ONNX Runtime and of fusion, and the notes on peers that could
not run or ran with caveats."""

from __future__ import annotations

import math

from benchmarks.latency_cases import FUSED, OURS, SHORT, UNTUNED


def _runner_cells(rs: dict, names) -> list[str]:
    """Each runner's median µs for a table, ``refused`` where it cannot run the model, ``*``
    after a caveat and ``≠`` where its output differs from eager's."""
    cells = []
    for n in names:
        r = rs.get(n, {})
        if r.get("note"):
            cells.append("[yellow]refused")
            continue
        mark = ("*" if r.get("caveats") else "") + (
            "≠" if r.get("agrees_with_eager") is False else "")
        cells.append(_us(r.get("median_us")) + mark)
    return cells


def _us(x: float | None) -> str:
    return "—" if x is None else f"{x:.1f}" if x < 1000 else f"{x:,.0f}"


def print_tables(rows: list[dict], peers: tuple[str, ...], repeats: int, calls: int,
                  threads: int) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console(width=220)
    names = [p for p in peers] + [OURS]
    table = Table(title=f"µs per call (median of {repeats} × {calls} calls, runners "
                        f"alternated), {threads} thread(s); ours ÷ peer: below 1 = ours "
                        f"faster; * caveat, ≠ output differs from eager (see notes)")
    table.add_column("model")
    table.add_column("batch", justify="right")
    for n in names:
        table.add_column(SHORT[n], justify="right")
    for n in peers:
        table.add_column(f"ours÷{SHORT[n]}", justify="right")
    for row in rows:
        if "error" in row:
            table.add_row(row["model"], str(row["batch"]), f"[red]{row['error'][:80]}")
            continue
        rs = row["runners"]
        cells = _runner_cells(rs, names)
        ours = rs[OURS].get("median_us")
        ratios = []
        for n in peers:
            peer = rs.get(n, {}).get("median_us")
            ratios.append(f"{ours / peer:.2f}" if ours and peer else "—")
        table.add_row(row["model"], str(row["batch"]), *cells, *ratios)
    console.print(table)
    if FUSED in peers:
        console.print(fused_text(fused_summary(rows)))

    ready = Table(title="Getting ready (seconds); our overhead beyond the kernels (µs): "
                        "ours − replay of the same kernel calls, per call and per kernel call")
    for col in ("model", "batch", "ours: StaticModule", "ours: 1st call",
                "torch.compile (cold)", "ONNX export", "exporter", "ours", "kernels",
                "overhead/call", "kernel calls", "overhead/op", "eager overhead/op"):
        ready.add_column(col, justify="right")
    for row in rows:
        if "error" in row:
            continue
        rs, ov = row["runners"], row.get("overhead", {})
        ours, tc, ort = rs[OURS], rs.get("torch_compile"), rs.get("onnxruntime")

        def secs(x):
            return "—" if x is None or math.isnan(x) else f"{x:.3f}"

        def per_op(o):
            x = o.get("overhead_us_per_op")
            return "—" if x is None else f"{x:.2f}"

        o, e = ov.get(OURS, {}), ov.get("eager", {})
        extra = (None if "kernels_us_per_call" not in o
                 else o["us_per_call"] - o["kernels_us_per_call"])
        ready.add_row(
            row["model"], str(row["batch"]),
            "refused" if ours["note"] else secs(ours["setup_seconds"]),
            secs(ours["first_call_seconds"]),
            "—" if tc is None else "refused" if tc["note"] else
            secs(tc["details"].get("compile_seconds")),
            "—" if ort is None else "refused" if ort["note"] else
            secs(ort["details"].get("export_seconds")),
            "—" if ort is None or ort["note"] else ort["details"].get("exporter", "?"),
            _us(o.get("us_per_call")), _us(o.get("kernels_us_per_call")), _us(extra),
            str(o.get("recorded_calls", "—")), per_op(o), per_op(e))
    console.print(ready)

    for row in rows:
        for name, o in row.get("overhead", {}).items():
            if "skipped" in o:
                console.print(f"{row['model']} (batch {row['batch']}) / {SHORT[name]} "
                              f"overhead per op not measured: {o['skipped']}")
    print_notes(rows, console)


def zoo_ratios(row: dict, ours_name: str = OURS
               ) -> tuple[float | None, float | None, float | None]:
    """(ours ÷ C++ SR, ours ÷ the faster of frozen TorchScript and C++ SR, ours ÷ ONNX
    Runtime) of one case, ours being the runner ``ours_name``; None where a side did not
    run."""
    rs = row.get("runners", {})

    def median(name: str) -> float | None:
        r = rs.get(name) or {}
        return None if r.get("note") else r.get("median_us")

    ours, cpp, ts = median(ours_name), median("pytorch_static_runtime"), median("torchscript")
    ort = median("onnxruntime")
    best = min((x for x in (cpp, ts) if x), default=None)
    return (ours / cpp if ours and cpp else None, ours / best if ours and best else None,
            ours / ort if ours and ort else None)


def ort_summary(rows: list[dict], ours_name: str = OURS) -> dict:
    """Geomeans of ours (the runner ``ours_name``) ÷ ONNX Runtime over the cases where both
    ran: all, batch 1, and the larger batches; the worst case."""
    by_batch: dict[str, list[tuple[float, str]]] = {"all": [], "batch_1": [], "batch_gt_1": []}
    for row in rows:
        ratio = None if "error" in row else zoo_ratios(row, ours_name)[2]
        if ratio is None:
            continue
        case = f"{row['model']}:{row['batch']}"
        by_batch["all"].append((ratio, case))
        by_batch["batch_1" if int(row["batch"]) == 1 else "batch_gt_1"].append((ratio, case))
    summary: dict = {}
    for key, xs in by_batch.items():
        summary[f"geomean_ours_over_ort_{key}"] = _geomean([x for x, _ in xs])
        summary[f"cases_ort_{key}"] = len(xs)
    worst = max(by_batch["all"], default=None)
    summary["worst_ours_over_ort"] = None if worst is None else {"ratio": worst[0],
                                                                 "case": worst[1]}
    return summary


def ort_text(summary: dict, label: str = "ours") -> str:
    def f(key: str) -> str:
        g = summary[f"geomean_ours_over_ort_{key}"]
        return ("—" if g is None else f"{g:.3f}") + f" ({summary[f'cases_ort_{key}']} cases)"

    worst = summary["worst_ours_over_ort"]
    return (f"geomean {label} ÷ ORT: {f('all')}; at batch 1 {f('batch_1')}, at larger batches "
            f"{f('batch_gt_1')}" + ("" if worst is None else
                                    f"; worst {worst['ratio']:.2f} ({worst['case']})"))


def fused_summary(rows: list[dict]) -> dict:
    """With ``static_runtime_fused`` among the peers: geomeans of fused ÷ C++ SR, fused ÷
    ours, and in how many cases fused is at most the best other peer (ORT, torch.compile
    included)."""
    vs_cpp, vs_ours, at_most_best, cases = [], [], 0, 0
    for row in rows:
        rs = row.get("runners", {})
        times = {n: r.get("median_us") for n, r in rs.items()
                 if not r.get("note") and r.get("median_us")}
        fused = times.get(FUSED)
        if not fused:
            continue
        cases += 1
        if times.get("pytorch_static_runtime"):
            vs_cpp.append(fused / times["pytorch_static_runtime"])
        if times.get(OURS):
            vs_ours.append(fused / times[OURS])
        others = [t for n, t in times.items() if n not in (FUSED, OURS)]
        at_most_best += bool(others) and fused <= min(others)
    return {"fused_cases": cases, "geomean_fused_over_cpp_sr": _geomean(vs_cpp),
            "geomean_fused_over_ours": _geomean(vs_ours), "fused_at_most_best_peer": at_most_best}


def fused_text(summary: dict) -> str:
    def f(x):
        return "—" if x is None else f"{x:.3f}"

    return (f"ours+fused (fusion_compiler='inductor') over {summary['fused_cases']} cases: "
            f"geomean ÷ C++ SR {f(summary['geomean_fused_over_cpp_sr'])}, ÷ ours "
            f"{f(summary['geomean_fused_over_ours'])}; at most the best other peer in "
            f"{summary['fused_at_most_best_peer']}")


def _geomean(xs: list[float]) -> float | None:
    return math.exp(sum(map(math.log, xs)) / len(xs)) if xs else None


def print_zoo_tables(rows: list[dict], peers: tuple[str, ...], repeats: int,
                      threads: int) -> dict:
    """The zoo table and notes; returns the summary (geomeans) also written to the JSON."""
    from rich.console import Console
    from rich.table import Table

    console = Console(width=220)
    names = list(peers) + [OURS]
    table = Table(title=f"Model zoo: µs per call (median of {repeats} samples, runners "
                        f"alternated), {threads} thread(s); ratios below 1 = ours faster; "
                        f"* caveat, ≠ output differs from eager (see notes)")
    for col in ("model", "family", "how", "nodes", "batch"):
        table.add_column(col, justify="right" if col in ("nodes", "batch") else "left")
    for n in names:
        table.add_column(SHORT[n], justify="right")
    table.add_column("ours÷C++ SR", justify="right")
    table.add_column("ours÷best(TS, C++ SR)", justify="right")
    with_ort = "onnxruntime" in peers
    if with_ort:
        table.add_column("ours÷ORT", justify="right")
    cpp_ratios, best_ratios = [], []
    for row in rows:
        head = [row["model"], row.get("family", ""), row.get("compile", ""),
                str(row.get("frozen_nodes", "")), str(row["batch"])]
        if "error" in row:
            table.add_row(*head, f"[red]{row['error'][:80]}")
            continue
        rs = row["runners"]
        cells = _runner_cells(rs, names)
        vs_cpp, vs_best, vs_ort = zoo_ratios(row)
        if vs_cpp:
            cpp_ratios.append(vs_cpp)
        if vs_best:
            best_ratios.append(vs_best)
        ratios = (vs_cpp, vs_best, vs_ort) if with_ort else (vs_cpp, vs_best)
        table.add_row(*head, *cells, *("—" if x is None else f"{x:.2f}" for x in ratios))
    console.print(table)
    summary = {"geomean_ours_over_cpp_sr": _geomean(cpp_ratios), "cases_cpp_sr": len(cpp_ratios),
               "geomean_ours_over_best": _geomean(best_ratios), "cases_best": len(best_ratios),
               "cases_ours_slower_than_best": sum(x > 1 for x in best_ratios)}
    if FUSED in peers:
        summary.update(fused_summary(rows))
        console.print(fused_text(summary))
    if with_ort:
        summary.update(ort_summary(rows))
        console.print(ort_text(summary))
        for other in (UNTUNED,):  # ours under other options, where asked for
            if other in peers:
                summary[other] = ort_summary(rows, other)
                console.print(ort_text(summary[other], SHORT[other]))
    g, gb = summary["geomean_ours_over_cpp_sr"], summary["geomean_ours_over_best"]
    console.print(f"geomean ours ÷ C++ SR over {len(cpp_ratios)} cases: "
                  + ("—" if g is None else f"{g:.3f}")
                  + "; ours ÷ best(TS, C++ SR): " + ("—" if gb is None else f"{gb:.3f}")
                  + f", ours slower in {summary['cases_ours_slower_than_best']} of "
                  f"{len(best_ratios)} cases")
    print_notes(rows, console)
    return summary


def print_notes(rows: list[dict], console) -> None:
    """Refusals, caveats and disagreements, one line each."""
    for row in rows:
        where = f"{row['model']} (batch {row['batch']})"
        if "error" in row:
            console.print(f"[red]{where}: {row['error']}")
            continue
        for name, r in row["runners"].items():
            if r["note"]:
                console.print(f"[yellow]{where} / {SHORT[name]} refused: {r['note']}")
            for c in r["caveats"]:
                console.print(f"{where} / {SHORT[name]}: {c}")
            if r["agrees_with_eager"] is False:
                console.print(f"[red]{where} / {SHORT[name]}: output differs from eager "
                              f"(max |Δ| {r['max_abs_error']})")
