"""Per-node cost of views, metadata, casts, creation and generic operators: ours against
PyTorch's C++ Static Runtime, on small graphs built of one operator kind.

Each case is a TorchScript function with about 20 instances of one operator (a chain of
views, 20 independent casts returned together, ...), on tensor inputs only (what the C++
runtime's Python binding accepts). Ours runs without ``specialize_signature`` (it would fold
sizes and comparisons away; the point is what a node costs when it runs). Both run it with
``benchmark_individual_ops``; the table gives, per node kind, µs per instance (the kind's
total divided by its instance count), the median of ``--repeats`` alternated samples of
``--runs`` calls each, single-threaded, in one process. Kinds that only feed the measured
one (``aten::size`` for a view's sizes) are shown too.

    python benchmarks/ops_overhead.py                 # ~1 minute on 2 cores
    python benchmarks/ops_overhead.py --cases view,to_noop --json out.json
"""

from __future__ import annotations

import json
import statistics
from collections import defaultdict
from pathlib import Path

import click
import torch
from rich.console import Console
from rich.table import Table

import static_runtime as sr

N = 20


def _chain(step: str, n: int = N) -> str:
    return "\n".join(f"    x = {step}" for _ in range(n))


def _each(expr: str, n: int = N) -> str:
    lines = [f"    y{i} = {expr.format(i=i)}" for i in range(n)]
    return "\n".join(lines) + f"\n    return {', '.join(f'y{i}' for i in range(n))}"


#: name → (TorchScript parameters, body, inputs)
CASES: dict[str, tuple[str, str, tuple]] = {
    "view": ("x: Tensor", _chain("x.view(x.size(0), -1, 8)") + "\n    return x",
             (torch.randn(4, 64),)),
    "reshape": ("x: Tensor", _chain("x.reshape(x.size(0), -1, 8)") + "\n    return x",
                (torch.randn(4, 64),)),
    "transpose": ("x: Tensor", _chain("x.transpose(0, 1)") + "\n    return x",
                  (torch.randn(4, 64),)),
    "unsqueeze": ("x: Tensor", _chain("x.unsqueeze(0)") + "\n    return x",
                  (torch.randn(4, 64),)),
    "expand": ("x: Tensor", _chain("x.expand(x.size(0), -1)") + "\n    return x",
               (torch.randn(4, 64),)),
    "permute": ("x: Tensor", _chain("x.permute(1, 0)") + "\n    return x",
                (torch.randn(4, 64),)),
    "slice_constant": ("x: Tensor", _chain("x[:, 0:64]") + "\n    return x",
                       (torch.randn(4, 64),)),
    "slice_input": ("x: Tensor", "    n = x.size(1) - 1\n" + _chain("x[:, 0:n]")
                    + "\n    return x", (torch.randn(4, 64),)),
    "select": ("x: Tensor", _each("x.select(1, {i})"), (torch.randn(4, 64),)),
    "size_dim_numel": ("x: Tensor", _each("x.size(1) + x.dim() + x.numel()"),
                       (torch.randn(4, 64),)),
    "contiguous_noop": ("x: Tensor", _chain("x.contiguous()") + "\n    return x",
                        (torch.randn(4, 64),)),
    "contiguous_copy": ("x: Tensor", _each("x.t().contiguous()"), (torch.randn(4, 64),)),
    "to_noop": ("x: Tensor", _chain("x.to(torch.float32)") + "\n    return x",
                (torch.randn(4, 64),)),
    "to_dtype_of_input": ("x: Tensor, y: Tensor", _each("x.to(y.dtype)"),
                          (torch.randn(4, 64), torch.zeros(1, dtype=torch.float64))),
    "zeros_device": ("x: Tensor", _each("torch.zeros(2, x.size(0), 64, device=x.device)"),
                     (torch.randn(4, 64),)),
    "contains": ("x: Tensor", "    d = {'k': x}\n    s = x.size()\n"
                 + _each("'k' in d or {i} in s"), (torch.randn(4, 64),)),
    "ne_int_list": ("x: Tensor", "    s = x.size()\n" + _each("x.size() != s"),
                    (torch.randn(4, 64),)),
}


def _function(name: str):
    params, body, _ = CASES[name]
    src = f"def f({params}):\n{body}\n"
    return torch.jit.CompilationUnit(src).f


def _per_instance(times: dict[str, float], counts: dict[str, int]) -> dict[str, float]:
    return {k: times[k] * 1e3 / counts[k] for k in times if counts.get(k)}


def measure(name: str, runs: int, repeats: int) -> list[dict]:
    fn = _function(name)
    args = CASES[name][2]
    # Without signature specialisation: it would fold sizes and comparisons away, and the
    # point is what a node costs when it runs.
    ours = sr.StaticModule(fn, options=sr.StaticModuleOptions(specialize_signature=False))
    cpp = torch._C._jit_to_static_module(fn.graph)
    ours(*args)
    samples: dict[tuple[str, str], list[float]] = defaultdict(list)
    for _ in range(repeats):
        m = ours.benchmark_individual_ops(args, {}, 10, runs)
        for k, v in _per_instance(m.time_per_node_type, m.instances_per_node_type).items():
            samples[("ours", k)].append(v)
        r = cpp.benchmark_individual_ops(list(args), {}, 10, runs)
        for k, v in _per_instance(r.time_per_node_type, r.instances_per_node_type).items():
            samples[("cpp", k)].append(v)
    kinds = sorted({k for _, k in samples})
    rows = []
    for kind in kinds:
        o = samples.get(("ours", kind))
        c = samples.get(("cpp", kind))
        if kind.startswith(("prim::TupleConstruct", "prim::Constant")):
            continue
        rows.append({"case": name, "kind": kind,
                     "ours_us": statistics.median(o) if o else None,
                     "cpp_us": statistics.median(c) if c else None})
    return rows


@click.command()
@click.option("--cases", default=",".join(CASES), help="comma-separated case names")
@click.option("--runs", default=200, help="calls per sample")
@click.option("--repeats", default=7, help="alternated samples per runtime")
@click.option("--json", "json_path", type=click.Path(path_type=Path), default=None)
def main(cases: str, runs: int, repeats: int, json_path: Path | None) -> None:
    torch.set_num_threads(1)
    console = Console()
    table = Table(title=f"µs per node instance (median of {repeats} × {runs} calls), "
                        f"torch {torch.__version__}")
    for col in ("case", "node kind", "ours", "C++ SR", "ours − C++"):
        table.add_column(col, justify="left" if col in ("case", "node kind") else "right")
    rows = []
    with torch.inference_mode():
        for name in cases.split(","):
            for row in measure(name, runs, repeats):
                rows.append(row)
                o, c = row["ours_us"], row["cpp_us"]
                table.add_row(name, row["kind"], "-" if o is None else f"{o:.2f}",
                              "-" if c is None else f"{c:.2f}",
                              "-" if o is None or c is None else f"{o - c:+.2f}")
    console.print(table)
    if json_path is not None:
        json_path.write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
