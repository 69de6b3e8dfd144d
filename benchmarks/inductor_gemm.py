"""Inductor's CPU C++ GEMM template as a kernel candidate (issue 19): is it faster than the
kernels ``kernel_choice="measure"`` chooses among, at the mid sizes where ONNX Runtime is?

For each product M × K × N (float32, with bias, one intra-op thread, inference mode) the
script compiles ``F.linear(x, W, b)`` with a constant ``W`` and ``b`` under
``max_autotune=True, max_autotune_gemm_backends="CPP"`` (the template only, so that Inductor's
own autotuning cannot fall back to ATen or MKL), and times, alternated, on the same tensors:

* ``aten``     ``addmm(b, x, Wᵀ, out=)`` — what the runtime runs without measuring
* ``onednn``   ``mkldnn._linear_pointwise`` on the weight reordered once, copied into ``out``
               (``ops/gemm.py``'s candidate as it serves)
* ``tmpl``     the template's generated C++ kernel, called directly with ``out``: the
               generated module's ``cpp_fused_*(x, packed W, b, out)``, Inductor's wrapper skipped
* ``tmpl_call``the generated module's ``call([x])`` (allocates its result): what calling the
               compiled artifact costs above the kernel
* ``tmpl_sym`` the template compiled once for a symbolic M (``torch.compile(dynamic=True)``,
               ``freezing=True``), its kernel called directly with ``out`` and M
* ``ORT``      a one-node ONNX ``Gemm(x, W, b, transB=1)`` session, one thread, io-binding

Compile times: ``compile s`` is ``compile_fx_inner`` on a cache this run started empty (the
first product also pays Inductor's one-off start: its C++ headers, the worker pool);
``warm s`` the same compile in a fresh process on that cache (Inductor's FX graph cache hit;
that process pays Inductor's one-off start on another product first);
``sym s`` the symbolic-M compile through ``torch.compile``. Every kernel's result is checked
against ``F.linear`` first.

    python benchmarks/inductor_gemm.py                      # the issue's products, ~3 min
    python benchmarks/inductor_gemm.py --shapes 64x512x128,197x192x768 --repeats 21
    python benchmarks/inductor_gemm.py --json-out inductor_gemm.json
"""

from __future__ import annotations

import json
import math
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import click
import torch
import torch.nn.functional as F

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

#: The products issue 19 names (M × K × N), and one row to show the fixed cost per call.
SHAPES = ((1, 64, 64), (32, 128, 512), (128, 128, 128), (16, 256, 256), (64, 512, 128),
          (8, 768, 768), (32, 768, 3072), (197, 192, 768))
_CALL_LINE = re.compile(r"^\s*(cpp_fused_\w+)\((.*)\)\s*$")


def _operands(m: int, k: int, n: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(m * 131 + k * 7 + n)
    return (torch.randn(m, k, generator=gen), torch.randn(n, k, generator=gen) / math.sqrt(k),
            torch.randn(n, generator=gen))


def compile_static(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor):
    """``(module's call, source, seconds)``: ``linear`` for exactly ``x``'s shape, ``W`` and
    ``b`` constants of the graph (so the template may prepack ``W``)."""
    from torch._guards import TracingContext, tracing
    from torch._inductor import config
    from torch._inductor.compile_fx import compile_fx_inner
    from torch._inductor.decomposition import select_decomp_table
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx.experimental.proxy_tensor import make_fx
    from torch.fx.experimental.symbolic_shapes import ShapeEnv

    def fn(x):
        return (F.linear(x, weight, bias),)

    start = time.perf_counter()
    with config.patch(max_autotune=True, max_autotune_gemm_backends="CPP"), \
            torch.inference_mode(False), torch.no_grad():
        x = x.clone()
        traced = make_fx(fn, decomposition_table=select_decomp_table())(x)
        # the constants are real tensors of the traced graph: the fake mode must accept them
        fake_mode = FakeTensorMode(shape_env=ShapeEnv(), allow_non_fake_inputs=True)
        with tracing(TracingContext(fake_mode)):
            compiled = compile_fx_inner(traced, [fake_mode.from_tensor(x, static_shapes=True)])
    return compiled.current_callable, compiled.source_code, time.perf_counter() - start


def compile_symbolic(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor):
    """``(module's call, source, seconds)``: ``linear`` for any row count, through
    ``torch.compile(dynamic=True)`` with ``freezing=True`` (the weight a frozen constant)."""
    from torch._inductor import config
    from torch._inductor.codecache import PyCodeCache

    torch._dynamo.reset()
    before = len(PyCodeCache.modules)
    start = time.perf_counter()
    with config.patch(max_autotune=True, max_autotune_gemm_backends="CPP", freezing=True), \
            torch.inference_mode(False), torch.no_grad():
        lin = torch.nn.Linear(weight.shape[1], weight.shape[0]).eval()
        lin.weight.copy_(weight)
        lin.bias.copy_(bias)
        x = x.clone()
        torch._dynamo.mark_dynamic(x, 0)
        torch.compile(lin, fullgraph=True, dynamic=True)(x)
    seconds = time.perf_counter() - start
    new = [m for m in PyCodeCache.modules[before:] if hasattr(m, "call")]
    if len(new) != 1:
        raise RuntimeError(f"expected one generated module, found {len(new)}")
    return new[0].call, Path(new[0].__file__).read_text(), seconds


def direct_kernel(call, source: str):
    """The generated module's one C++ kernel as ``bind(x, out)() -> out``: its arguments resolved from
    the wrapper's source (the input, the module's constants, the output buffer, and M when
    symbolic). Raises if the wrapper does anything but call one kernel."""
    body = source[source.index("def call("):]
    body = body[:body.index("\nrunner = ")]
    unpack = re.search(r"^\s*(.+?),?\s*=\s*args\s*$", body, re.MULTILINE)
    tensor_in = re.search(r"assert_size_stride\((\w+),", body).group(1)
    sym = re.search(r"^\s*(s\d+)\s*=\s*(\w+)\s*$", body, re.MULTILINE)
    calls = [m for m in (_CALL_LINE.match(line) for line in body.splitlines()) if m]
    if unpack is None or len(calls) != 1:
        raise RuntimeError("the wrapper is not one kernel call")
    module_globals = call.__func__.__globals__
    kernel = module_globals[calls[0].group(1)]
    slots = []
    for name in (a.strip() for a in calls[0].group(2).split(",")):
        if name == tensor_in:
            slots.append("x")
        elif name.startswith("buf"):
            slots.append("out")
        elif sym is not None and name == sym.group(1):
            slots.append("M")
        else:
            slots.append(module_globals[name])
    roles = [s if isinstance(s, str) else "" for s in slots]
    if roles.count("x") != 1 or roles.count("out") != 1:
        raise RuntimeError(f"cannot map the kernel's arguments {calls[0].group(2)}")

    def bind(x: torch.Tensor, out: torch.Tensor):
        """A zero-argument call of the kernel on ``x`` into ``out``, its argument list built
        once (as a runtime would hold it for a planned tensor)."""
        args = tuple(x if r == "x" else out if r == "out" else x.shape[0] if r == "M" else s
                     for r, s in zip(roles, slots))

        def run() -> torch.Tensor:
            kernel(*args)
            return out

        return run

    return bind


def warm_compile_seconds(shape: tuple[int, int, int], cache_dir: str) -> float:
    """The static compile of ``shape`` in a fresh process on ``cache_dir``."""
    env = dict(os.environ, TORCHINDUCTOR_CACHE_DIR=cache_dir,
               PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT),
                                                        os.environ.get("PYTHONPATH")])))
    out = subprocess.run([sys.executable, __file__, "--compile-only", "x".join(map(str, shape))],
                         env=env, capture_output=True, text=True, check=True)
    return float(out.stdout.strip().splitlines()[-1])


def time_shape(shape: tuple[int, int, int], repeats: int, sample_ms: float,
               cache_dir: str) -> dict:
    from benchmarks.kernels import _ort_gemm, _time_forms
    from static_runtime.ops.gemm import GemmKernels

    m, k, n = shape
    x, weight, bias = _operands(m, k, n)
    x_before = x.clone()
    expected = F.linear(x, weight, bias)
    call, source, compile_s = compile_static(x, weight, bias)
    tmpl = direct_kernel(call, source)
    sym_call, sym_source, sym_s = compile_symbolic(x, weight, bias)
    sym = direct_kernel(sym_call, sym_source)
    warm_s = warm_compile_seconds(shape, cache_dir)

    kernels = GemmKernels(weight.t(), bias, "none")
    aten_k, onednn_k = kernels.kernel("aten", m), kernels.kernel("onednn", m)
    out = torch.empty(m, n)
    forms = {"aten": lambda: aten_k(x, out), "onednn": lambda: onednn_k(x, out),
             "tmpl": tmpl(x, out), "tmpl_call": lambda: call([x]),
             "tmpl_sym": sym(x, out)}
    for name, fn in forms.items():
        out.fill_(math.nan)
        result = fn()
        result = result[0] if isinstance(result, list | tuple) else result
        if not torch.allclose(result, expected, rtol=1e-4, atol=1e-4):
            raise AssertionError(f"{name} disagrees with F.linear at {m}×{k}×{n}")
    ort_run, ort_result = _ort_gemm(m, n, weight, bias, "none", x)
    torch.testing.assert_close(ort_result(), expected, rtol=1e-3, atol=1e-3)
    forms["ORT"] = ort_run
    med = _time_forms(forms, repeats, sample_ms)
    torch.testing.assert_close(x, x_before, rtol=0, atol=0)  # no kernel wrote its input
    flops = 2 * m * k * n
    return {"M": m, "K": k, "N": n, "us": med,
            "gflops": {name: flops / (t * 1e3) for name, t in med.items()},
            "compile_s": compile_s, "warm_s": warm_s, "sym_compile_s": sym_s}


def _print(rows: list[dict]) -> None:
    names = ("aten", "onednn", "tmpl", "tmpl_call", "tmpl_sym", "ORT")
    print(f"{'M×K×N':>14s} " + " ".join(f"{n + ' µs':>12s}" for n in names)
          + "   GFLOP/s " + " / ".join(names[:3] + names[4:])
          + "   compile s / warm s / sym s")
    for r in rows:
        us, gf = r["us"], r["gflops"]
        print(f"{r['M']:>4d}×{r['K']:>4d}×{r['N']:>4d} "
              + " ".join(f"{us[n]:12.1f}" for n in names) + "   "
              + " / ".join(f"{gf[n]:.0f}" for n in names if n != "tmpl_call")
              + f"   {r['compile_s']:.1f} / {r['warm_s']:.2f} / {r['sym_compile_s']:.1f}")
    mid = [r for r in rows if r["M"] >= 8]
    reach = [r for r in mid if r["gflops"]["tmpl"] >= 0.9 * r["gflops"]["ORT"]]
    print(f"template at >= 90 % of ORT's GFLOP/s: {len(reach)} of {len(mid)} products with "
          f"M >= 8; template faster than the better of aten and onednn on "
          f"{sum(r['us']['tmpl'] < min(r['us']['aten'], r['us']['onednn']) for r in mid)}")
    over = sorted(r["us"]["tmpl_call"] - r["us"]["tmpl"] for r in rows)
    print(f"call([x]) over the direct kernel: median {over[len(over) // 2]:.1f} µs per call "
          f"(allocating its result; a burst of load moves single rows)")


@click.command()
@click.option("--shapes", default=None, help="Comma-separated MxKxN (default: the issue's).")
@click.option("--repeats", default=11, show_default=True, help="Timing samples per form.")
@click.option("--sample-ms", default=3.0, show_default=True, help="Length of one sample.")
@click.option("--json-out", default=None, help="Write the rows as JSON here.")
@click.option("--compile-only", default=None, hidden=True,
              help="(internal) compile one MxKxN and print the seconds it took.")
def main(shapes: str | None, repeats: int, sample_ms: float, json_out: str | None,
         compile_only: str | None) -> None:
    torch.set_num_threads(1)
    if compile_only:
        # Inductor's one-off start in a process (its C++ headers, the compile workers) is
        # paid by a product of no interest first: what is timed is the cached product's load
        compile_static(*_operands(2, 8, 8))
        m, k, n = map(int, compile_only.split("x"))
        x, weight, bias = _operands(m, k, n)
        _, _, seconds = compile_static(x, weight, bias)
        print(seconds)
        return
    todo = [tuple(map(int, s.split("x"))) for s in shapes.split(",")] if shapes else SHAPES
    with tempfile.TemporaryDirectory(prefix="sr_inductor_gemm_") as cache_dir:
        # before Inductor is first used: its caches live here, empty at the start
        os.environ["TORCHINDUCTOR_CACHE_DIR"] = cache_dir
        rows = []
        with torch.inference_mode():
            for shape in todo:
                rows.append(time_shape(shape, repeats, sample_ms, cache_dir))
                print(f"  {shape}: done", file=sys.stderr, flush=True)
    _print(rows)
    print(f"(single thread; medians of {repeats} alternated samples; torch {torch.__version__})")
    if json_out:
        Path(json_out).write_text(json.dumps({"threads": 1, "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
