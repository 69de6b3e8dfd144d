"""Per-node-kind comparison with PyTorch's C++ Static Runtime over many models (issue 11):
``static_runtime.compare.ops.compare`` — both runtimes' ``benchmark_individual_ops`` on the
same inputs, alternated, medians — on the built-in models (``static_runtime/models/``)
and, where ``benchmarks.zoo`` can be imported, on every zoo model at each of its batches.

Each (model, batch) case runs in a fresh process, single-threaded. Where the C++ runtime
cannot be profiled (it refuses the model, or the model takes non-tensor arguments, which
its Python ``benchmark_individual_ops`` cannot pass) the case is compared with TorchScript's
profile instead (``torch.autograd.profiler``, measured differently: see ``static_runtime.compare.ops``);
such cases are listed, and left out of the aggregated table, which is of C++ cases only.

    python benchmarks/op_compare.py                      # built-in models (+ zoo), batch 1
    python benchmarks/op_compare.py --models mlp,dlrm --batches all --repeats 3

Prints a short table per case and one aggregated over all cases: per kind (after
``compare.ops.KIND_MAP``), the cases it appears in, instances over all of them, µs per
instance on each side (a side's time for the kind over all cases ÷ its instances), their
ratio, each side's time summed over the cases (µs per call of each case, added) and the
cost to us (ours minus C++) — sorted by that cost. ``(outside the nodes)``: what the whole
profiled calls spend outside their nodes. JSON to
``benchmarks/results/op_compare.json``.
"""

from __future__ import annotations

import json
import os
import platform
import sys
import tempfile
import time
import warnings
from collections import defaultdict
from pathlib import Path
from typing import Any

import click

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # `python benchmarks/op_compare.py`: imports from the root
    sys.path.insert(0, str(ROOT))

from benchmarks.workers import run_worker  # (needs ROOT on the path)

RESULTS = Path(__file__).parent / "results"
CPP = "pytorch_static_runtime"


def _zoo() -> dict[str, Any]:
    """The zoo (``benchmarks.zoo.ZOO``), or {} where it cannot be imported."""
    try:
        from benchmarks.zoo import ZOO
    except ImportError:
        return {}
    return dict(ZOO)


def _builtin(name: str):
    from static_runtime.models import MODELS

    return MODELS.get(name)


def _case_model(source: str, name: str, batch: int) -> tuple[Any, tuple]:
    """(a TorchScript module, its inputs) for one case."""
    import torch

    if source == "zoo":
        entry = _zoo()[name]
        return entry.scripted(), tuple(entry.inputs(batch))
    spec = _builtin(name)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        scripted = torch.jit.script(spec.build())
    return scripted, tuple(spec.example_inputs(batch))


def worker(source: str, name: str, batch: int, repeats: int, warmup: int,
           runs: int) -> dict[str, Any]:
    import torch

    import static_runtime as sr
    from static_runtime.compare import ops as compare_ops

    torch.set_num_threads(1)
    scripted, inputs = _case_model(source, name, batch)
    mod = sr.StaticModule(scripted)
    mod(*inputs)
    c = compare_ops.compare(mod, inputs, scripted=scripted, repeats=repeats, warmup=warmup,
                            runs=runs)
    return {"source": source, "model": name, "batch": batch, **c.as_dict()}


def run_isolated(source: str, name: str, batch: int, repeats: int, warmup: int,
                 runs: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "result.json"
        cmd = [sys.executable, __file__, "--worker", f"{source}:{name}:{batch}",
               "--worker-out", str(out), "--repeats", str(repeats), "--warmup", str(warmup),
               "--runs", str(runs)]
        return run_worker(cmd, out, {"source": source, "model": name, "batch": batch})


def aggregate(cases: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per kind over the cases compared with the C++ runtime: the cases it appears
    in, instances on each side (summed), µs per instance on each side (a side's time for
    the kind over all cases ÷ its instances), their ratio, and the cost to us summed over
    the cases (µs per call of each case, added)."""
    acc: dict[str, dict[str, Any]] = defaultdict(lambda: {
        "cases": [], "ours_n": 0.0, "cpp_n": 0.0, "ours_us": 0.0, "cpp_us": 0.0,
        "cost_us": 0.0})
    for case in cases:
        if "error" in case or case["against"] != CPP:
            continue
        for r in case["rows"]:
            a = acc[r["kind"]]
            a["cases"].append(f"{case['model']}:{case['batch']}")
            a["ours_n"] += r["ours_instances"] or 0
            a["cpp_n"] += r["other_instances"] or 0
            a["ours_us"] += r["ours_us"] or 0.0
            a["cpp_us"] += r["other_us"] or 0.0
            a["cost_us"] += r["cost_us"]
    rows = []
    for kind, a in acc.items():
        ours_per = a["ours_us"] / a["ours_n"] if a["ours_n"] else None
        cpp_per = a["cpp_us"] / a["cpp_n"] if a["cpp_n"] else None
        rows.append({"kind": kind, "cases": len(a["cases"]), "case_list": a["cases"],
                     "ours_instances": a["ours_n"], "cpp_instances": a["cpp_n"],
                     "ours_us_per_instance": ours_per, "cpp_us_per_instance": cpp_per,
                     "ratio": ours_per / cpp_per if ours_per is not None and cpp_per else None,
                     "ours_us": a["ours_us"], "cpp_us": a["cpp_us"], "cost_us": a["cost_us"]})
    rows.sort(key=lambda r: -r["cost_us"])
    return rows


def _f(x: float | None, spec: str = ".2f") -> str:
    return "" if x is None else format(x, spec)


def _n(x: float | None) -> str:
    if x is None:
        return ""
    return str(int(x)) if float(x).is_integer() else f"{x:.1f}"


def print_case(case: dict[str, Any], top: int) -> None:
    label = f"{case['model']}:{case['batch']}"
    if "error" in case:
        print(f"\n### {label}: {case['error']}")
        return
    peer = {"pytorch_static_runtime": "C++", "torchscript": "TorchScript"}[case["against"]]
    ours = sum(r["ours_us"] or 0 for r in case["rows"])
    other = sum(r["other_us"] or 0 for r in case["rows"])
    print(f"\n### {label} ({case['source']}): ours {ours:.1f} µs, {peer} {other:.1f} µs per "
          f"profiled call")
    if case.get("note"):
        print(f"\n{case['note']}")
    print(f"\n| kind | ours n | {peer} n | ours µs/n | {peer} µs/n | cost µs/call |")
    print("|---|---|---|---|---|---|")
    rows = [r for r in case["rows"] if r["kind"] != "(outside the nodes)"][:top]
    rows += [r for r in case["rows"] if r["kind"] == "(outside the nodes)"]
    for r in rows:
        print(f"| `{r['kind']}` | {_n(r['ours_instances'])} | {_n(r['other_instances'])} "
              f"| {_f(r['ours_us_per_instance'])} | {_f(r['other_us_per_instance'])} "
              f"| {r['cost_us']:+.2f} |")


def print_aggregate(rows: list[dict[str, Any]], top: int | None) -> None:
    print("\n| kind | cases | ours n | C++ n | ours µs/n | C++ µs/n | ours ÷ C++ "
          "| ours µs (Σ) | C++ µs (Σ) | cost to us µs (Σ) |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in rows[:top] if top else rows:
        print(f"| `{r['kind']}` | {r['cases']} | {_n(r['ours_instances'] or None)} "
              f"| {_n(r['cpp_instances'] or None)} | {_f(r['ours_us_per_instance'])} "
              f"| {_f(r['cpp_us_per_instance'])} | {_f(r['ratio'])} | {r['ours_us']:.1f} "
              f"| {r['cpp_us']:.1f} | {r['cost_us']:+.1f} |")


def _cases(models: str, batches: str, zoo: dict[str, Any]) -> list[tuple[str, str, int]]:
    from static_runtime.models import MODELS

    names = [m for m in (x.strip() for x in models.split(",")) if m] if models else (
        list(MODELS) + list(zoo))
    cases = []
    for name in names:
        if name in zoo:
            all_batches = tuple(zoo[name].batches)
            source = "zoo"
        elif name in MODELS:
            all_batches = (1, 16)
            source = "builtin"
        else:
            raise click.BadParameter(f"unknown model {name!r}; built-in: {sorted(MODELS)}, "
                                     f"zoo: {sorted(zoo)}", param_hint="--models")
        chosen = all_batches if batches == "all" else tuple(int(b) for b in batches.split(","))
        cases += [(source, name, b) for b in chosen]
    return cases


@click.command()
@click.option("--models", default="", help="Comma-separated names (default: all built-in "
                                           "models and the zoo's).")
@click.option("--batches", default="1", show_default=True,
              help="Comma-separated batch sizes, or 'all' (a zoo model's own batches; "
                   "built-in models: 1,16).")
@click.option("--repeats", default=5, show_default=True, help="Alternated profiles (medians).")
@click.option("--warmup", default=10, show_default=True)
@click.option("--runs", default=100, show_default=True, help="Profiled calls per repeat.")
@click.option("--top", default=10, show_default=True, help="Kinds per case table.")
@click.option("--json-out", default=str(RESULTS / "op_compare.json"), show_default=True)
@click.option("--worker", default=None, hidden=True)
@click.option("--worker-out", default=None, hidden=True)
def main(models: str, batches: str, repeats: int, warmup: int, runs: int, top: int,
         json_out: str, worker: str | None, worker_out: str | None) -> None:
    """Per-node-kind comparison with PyTorch's C++ Static Runtime over many models."""
    if worker:
        source, name, batch = worker.split(":")
        result = globals()["worker"](source, name, int(batch), repeats, warmup, runs)
        Path(worker_out).write_text(json.dumps(result, default=str))
        return
    zoo = _zoo()
    cases = _cases(models, batches, zoo)
    results, start = [], time.perf_counter()
    for k, (source, name, batch) in enumerate(cases, start=1):
        row = run_isolated(source, name, batch, repeats, warmup, runs)
        print(f"[{k}/{len(cases)}] {name}:{batch} ({source}): "
              f"{row.get('worker_seconds', float('nan')):.0f} s"
              + (f" {row['error']}" if "error" in row else "")
              + (f" — {row['note']}" if row.get("note") else ""), file=sys.stderr, flush=True)
        results.append(row)
    agg = aggregate(results)
    import torch

    meta = {"command": " ".join(["python", *sys.argv]), "repeats": repeats, "warmup": warmup,
            "runs": runs, "threads": 1, "zoo": bool(zoo), "torch": torch.__version__,
            "python": platform.python_version(), "cpus": os.cpu_count(),
            "date": time.strftime("%Y-%m-%d %H:%M:%S"),
            "wall_seconds": time.perf_counter() - start}
    Path(json_out).parent.mkdir(parents=True, exist_ok=True)
    Path(json_out).write_text(json.dumps({"meta": meta, "cases": results, "aggregate": agg},
                                         indent=2, default=str))
    print(f"# Per-node-kind comparison with PyTorch's C++ Static Runtime\n\n{meta['command']}; "
          f"median of {repeats} alternated profiles of {runs} calls; torch {torch.__version__}"
          f"; 1 thread")
    for case in results:
        print_case(case, top)
    other = [f"{c['model']}:{c['batch']}" for c in results
             if "error" not in c and c["against"] != CPP]
    print(f"\n## All cases compared with the C++ runtime ({len(results) - len(other)} of "
          f"{len(results)}), per kind")
    if other:
        print(f"\nNot in it (compared with TorchScript's profile instead): {', '.join(other)}")
    print_aggregate(agg, None)
    print(f"\nJSON: {json_out} ({meta['wall_seconds']:.0f} s)", file=sys.stderr)


if __name__ == "__main__":
    main()
