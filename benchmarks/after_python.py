"""How much slower a kernel runs right after a stretch of pure Python, on this machine.

On the Intel Xeon of sessions 20–21 (KVM), a vector kernel called right after ~0.6 ms of
Python ran up to 7 × slower than one called right after another kernel (ATen's ``exp`` of 64 k
floats 20 → 146 µs in one run, 30 → 95 in another; MKL's 256 × 256 product 291 → 574, and
565 → 609 in a run where it was slow throughout), with ATen's AVX-512 kernels or its AVX2 or
scalar ones (``ATEN_CPU_CAPABILITY``), while flushing 16 MB of data caches before a call
changed nothing. A new size's
first call runs ~0.5 ms of Python in one stretch (laying the size out, binding its function)
before its kernels, which then pay this; generated code, with a few µs of Python between
kernels, does not. This prints, per kernel, the median µs of a call after ``--busy`` empty
Python loop iterations (0 first), so the effect can be compared across machines.

    python benchmarks/after_python.py [--busy 0,3000,30000] [--calls 300]
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable

import click
import torch
from rich.console import Console
from rich.table import Table


def _median_after(kernel: Callable[[], object], busy: int, calls: int) -> float:
    times = []
    for _ in range(calls):
        for _ in range(busy):
            pass
        start = time.perf_counter_ns()
        kernel()
        times.append(time.perf_counter_ns() - start)
    return statistics.median(times) / 1e3


@click.command()
@click.option("--busy", default="0,3000,30000", show_default=True,
              help="empty Python loop iterations before each call (~20 ns each)")
@click.option("--calls", default=300, show_default=True, help="timed calls per cell")
def main(busy: str, calls: int) -> None:
    torch.set_num_threads(1)
    a, b, out = torch.randn(256, 256), torch.randn(256, 256), torch.empty(256, 256)
    x = torch.randn(1 << 16)
    kernels = {"mm 256 × 256 (out=)": lambda: torch.mm(a, b, out=out),
               "exp, 64 k floats": lambda: torch.exp(x),
               "add, 64 k floats": lambda: torch.add(x, 1.0)}
    counts = [int(n) for n in busy.split(",")]
    table = Table(title=f"µs per call after n empty Python iterations (median of {calls}; "
                        f"ATen {torch.backends.cpu.get_cpu_capability()})")
    table.add_column("kernel")
    for n in counts:
        table.add_column(f"n={n:,}", justify="right")
    for name, kernel in kernels.items():
        table.add_row(name, *(f"{_median_after(kernel, n, calls):.1f}" for n in counts))
    Console().print(table)


if __name__ == "__main__":
    main()
