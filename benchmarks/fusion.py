"""Fused regions (issue 12): what a compiled region costs and where it pays.

Three measurements, single-threaded, medians of alternated samples:

``paths``   the ways of calling one Inductor-compiled region (a five-operator pointwise chain
            on 1 × 64 floats): ``torch._inductor.compile``'s wrapper, ``CompiledFxGraph``,
            its generated ``call(args)`` (what ``ops/inductor.py`` keeps), the same with
            ``cpp_wrapper=True`` (the wrapper in C++), AOTInductor (``aoti_compile_and_package``
            + ``aoti_load_package``), and the operators run one by one by our runtime.
``sizes``   the region size curve behind ``passes/regions.MIN_KERNELS``: chains of 1–6
            pointwise operators at 64, 4 096 and 262 144 elements, ours without and with
            ``fusion_compiler="inductor"`` (regions forced to form at every size for this).
``models``  each built-in model at batch 1 (``zoo``: each model of the zoo), ours without and
            with the option in one process,
            alternated (the side-by-side table with every peer is ``latency.py``; this one
            isolates the option): regions formed, whether the generated code is the same,
            µs per call each way.
``startup`` seconds to a first result for the control-flow model: ``StaticModule`` with
            the option on a cold Inductor cache (an empty ``TORCHINDUCTOR_CACHE_DIR``) and a
            warm one, against ``torch.compile`` cold and warm, each in a fresh process.

    python benchmarks/fusion.py                  # all three, ~3 minutes on an idle machine
    python benchmarks/fusion.py paths sizes
    python benchmarks/fusion.py models zoo
"""

from __future__ import annotations

import functools
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import click
import torch
from rich.console import Console
from rich.table import Table

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import static_runtime as sr
from static_runtime.compare import median_us
from static_runtime.passes import regions


def _alternate(fns: dict, repeats: int = 15, calls: int = 2000) -> dict[str, float]:
    """µs per call of each function, median over ``repeats`` samples, alternated."""
    return median_us(fns, repeats=repeats, calls=calls, warmup=50)


def _chain(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    a = torch.sigmoid(x * y)
    return torch.tanh(a + x) * a


def _chain_tuple(x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor]:
    return (_chain(x, y),)


def paths(console: Console) -> None:
    import torch._inductor
    from torch._inductor import config
    from torch._inductor.compile_fx import compile_fx_inner
    from torch._inductor.decomposition import select_decomp_table
    from torch.fx.experimental.proxy_tensor import make_fx

    x, y = torch.randn(1, 64), torch.randn(1, 64)
    traced = make_fx(_chain_tuple, decomposition_table=select_decomp_table())(x, y)
    wrapped = torch._inductor.compile(traced, [x, y])
    inner = compile_fx_inner(traced, [x, y])
    with config.patch(cpp_wrapper=True):
        cpp = compile_fx_inner(make_fx(_chain_tuple)(x, y), [x, y])
    fns = {
        "torch._inductor.compile wrapper": lambda: wrapped(x, y),
        "CompiledFxGraph.__call__": lambda: inner([x, y]),
        "generated call(args) (ours)": lambda: inner.current_callable([x, y]),
        "cpp_wrapper=True call(args)": lambda: cpp.current_callable([x, y]),
    }
    try:
        from torch._inductor import aoti_compile_and_package, aoti_load_package

        class Chain(torch.nn.Module):
            def forward(self, x, y):
                return _chain(x, y)

        with tempfile.TemporaryDirectory() as d:
            ep = torch.export.export(Chain(), (x, y))
            path = aoti_compile_and_package(ep, package_path=os.path.join(d, "chain.pt2"))
            aoti = aoti_load_package(path)
            fns["AOTInductor package"] = lambda: aoti(x, y)
            aoti(x, y)
    except Exception as e:  # noqa: BLE001 — reported, not fatal
        console.print(f"AOTInductor: not measured ({type(e).__name__}: {str(e)[:120]})")
    mod = sr.StaticModule(torch.jit.script(_chain))
    fns["ours, unfused (5 nodes)"] = lambda: mod(x, y)
    fused = sr.StaticModule(torch.jit.script(_chain),
                            options=sr.StaticModuleOptions(fusion_compiler="inductor"))
    fns["ours, one fused region"] = lambda: fused(x, y)
    with torch.inference_mode():
        times = _alternate(fns)
    table = Table(title="Calling a compiled 5-operator pointwise region, 1 × 64 float32 (µs)")
    table.add_column("path")
    table.add_column("µs/call", justify="right")
    for k, v in times.items():
        table.add_row(k, f"{v:.2f}")
    console.print(table)


_OPS = ["torch.tanh", "torch.sigmoid", "torch.neg", "torch.exp", "torch.abs", "torch.sin"]


def _chain_fn(n: int):
    body = "\n".join(f"    x = {_OPS[i]}(x)" for i in range(n))
    src = f"def chain{n}(x: torch.Tensor) -> torch.Tensor:\n{body}\n    return x\n"
    cu = torch.jit.CompilationUnit(src)
    return getattr(cu, f"chain{n}")


def sizes(console: Console) -> None:
    table = Table(title="Chains of n pointwise operators: ours without ÷ with a fused region "
                        "(above 1: the region pays)")
    table.add_column("elements")
    counts = range(1, 7)
    for n in counts:
        table.add_column(f"n={n}", justify="right")
    old = regions.MIN_KERNELS
    regions.MIN_KERNELS = 1
    try:
        for numel in (64, 4096, 262144):
            x = torch.randn(numel // 64, 64)
            cells = []
            for n in counts:
                fn = _chain_fn(n)
                plain = sr.StaticModule(fn)
                fused = sr.StaticModule(fn, options=sr.StaticModuleOptions(
                    fusion_compiler="inductor"))
                calls = max(20, min(2000, 2_000_000 // numel))
                with torch.inference_mode():
                    t = _alternate({"plain": functools.partial(plain, x),
                                    "fused": functools.partial(fused, x)},
                                   repeats=9, calls=calls)
                cells.append(f"{t['plain'] / t['fused']:.2f} ({t['plain']:.1f}/{t['fused']:.1f})")
            table.add_row(str(numel), *cells)
    finally:
        regions.MIN_KERNELS = old
    console.print(table)
    console.print("cells: plain ÷ fused (µs plain / µs fused)")


def _cases(zoo: bool):
    """(name, scripted module, inputs at batch 1) of the built-in models or the zoo."""
    if zoo:
        from benchmarks.zoo import ZOO

        for name, m in ZOO.items():
            yield name, m.scripted(), m.inputs(1)
        return
    from static_runtime.models import MODELS

    for name, spec in MODELS.items():
        yield (name, torch.jit.script(spec.factory().eval()),
               spec.make_inputs(1, torch.Generator().manual_seed(0)))


def models(console: Console, zoo: bool = False) -> None:
    table = Table(title=f"{'Model zoo' if zoo else 'Built-in models'}, batch 1: ours without "
                        "and with fusion_compiler='inductor', alternated in one process "
                        "(µs per call, median of 15 samples)")
    for col in ("model", "regions", "same code", "without", "with", "with ÷ without"):
        table.add_column(col, justify="left" if col == "model" else "right")
    ratios = []
    for name, scripted, x in _cases(zoo):
        plain = sr.StaticModule(scripted)
        fused = sr.StaticModule(scripted, options=sr.StaticModuleOptions(
            fusion_compiler="inductor"))
        a, b = plain.runtime(), fused.runtime()
        with torch.inference_mode():
            a(*x)
            b(*x)
            once = time.perf_counter()
            a(*x)
            calls = max(5, min(300, int(0.01 / max(time.perf_counter() - once, 1e-6))))
            t = _alternate({"without": functools.partial(a, *x), "with": functools.partial(b, *x)},
                           repeats=15, calls=calls)
        ratio = t["with"] / t["without"]
        ratios.append(ratio)
        regions_formed = sum(n.kind == regions.FUSED_REGION for n in fused.graph.walk())
        recurrent = sum(n.kind in ("static_runtime::lstm", "static_runtime::gru")
                        for n in fused.graph.walk())
        table.add_row(name, str(regions_formed) + (f" (+{recurrent} rnn)" if recurrent else ""),
                      "yes" if plain.code == fused.code else "no",
                      f"{t['without']:.1f}", f"{t['with']:.1f}", f"{ratio:.2f}")
    console.print(table)
    console.print(f"geomean with ÷ without: {statistics.geometric_mean(ratios):.3f}")


_STARTUP = r"""
import json, sys, time, torch
sys.path.insert(0, {root!r})
torch.set_num_threads(1)
start = time.perf_counter()
import static_runtime as sr
from static_runtime.models import MODELS
spec = MODELS["control_flow"]
model = spec.factory().eval()
x = spec.make_inputs(1, torch.Generator().manual_seed(0))
with torch.inference_mode():
    if {which!r} == "ours":
        mod = sr.StaticModule(torch.jit.script(model),
                              options=sr.StaticModuleOptions(fusion_compiler="inductor"))
        built = time.perf_counter()
        mod(*x)
    else:
        fn = torch.compile(model)
        built = time.perf_counter()
        fn(*x)
end = time.perf_counter()
print(json.dumps({{"build": built - start, "first_result": end - start}}))
"""


def startup(console: Console) -> None:
    table = Table(title="Seconds to a first result, control_flow b1, fresh process "
                        "(imports included)")
    for col in ("runtime", "cache", "build", "first result"):
        table.add_column(col, justify="right" if col in ("build", "first result") else "left")
    for which in ("ours", "torch.compile"):
        with tempfile.TemporaryDirectory() as cache:
            env = dict(os.environ, TORCHINDUCTOR_CACHE_DIR=cache)
            for state in ("cold", "warm"):
                out = subprocess.run(
                    [sys.executable, "-c", _STARTUP.format(root=str(ROOT), which=which)],
                    env=env, capture_output=True, text=True, check=True)
                r = json.loads(out.stdout.strip().splitlines()[-1])
                table.add_row(which if which == "torch.compile" else "ours (fusion_compiler)",
                              state, f"{r['build']:.2f}", f"{r['first_result']:.2f}")
    console.print(table)


@click.command()
@click.argument("parts", nargs=-1,
                type=click.Choice(["paths", "sizes", "models", "zoo", "startup"]))
def main(parts: tuple[str, ...]) -> None:
    torch.set_num_threads(1)
    console = Console(width=160)
    console.print(f"torch {torch.__version__}, load average {os.getloadavg()[0]:.2f}")
    for part in parts or ("paths", "sizes", "models", "startup"):
        {"paths": paths, "sizes": sizes, "models": models, "startup": startup,
         "zoo": functools.partial(models, zoo=True)}[part](console)


if __name__ == "__main__":
    main()
