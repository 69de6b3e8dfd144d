"""Where oneDNN's GEMM time goes (issue 19): per product, the µs of a call of
``torch.ops.mkldnn._linear_pointwise`` on a prepacked weight (what ``kernel_choice="measure"``
runs when oneDNN wins) against the µs oneDNN itself reports for executing its inner-product
primitive (``ONEDNN_VERBOSE=1``), and ONNX Runtime's one-node ``Gemm``. The difference is
what the call costs around the kernel (ATen's wrapper, ideep's primitive set-up per call).

Two runs per product in child processes: one timed without the verbose log (the call), one
with it (the primitive's own times, median over calls). One thread.

    python benchmarks/onednn_overhead.py
    python benchmarks/onednn_overhead.py --shapes 32x128x512,8x768x768
"""

from __future__ import annotations

import os
import re
import statistics
import subprocess
import sys

import click

SHAPES = "1x64x64,16x256x256,32x128x128,32x128x512,128x128x128,8x768x768,197x192x768"

_CHILD = r"""
import sys, time, torch
torch.set_num_threads(1)
m, k, n = map(int, sys.argv[1].split("x"))
calls = int(sys.argv[2])
g = torch.Generator().manual_seed(0)
x, w, b = torch.randn(m, k, generator=g), torch.randn(n, k, generator=g), torch.randn(n, generator=g)
with torch.inference_mode():
    wp = torch.ops.mkldnn._reorder_linear_weight(w, m)
    torch.testing.assert_close(torch.ops.mkldnn._linear_pointwise(x, wp, b, "none", [], ""),
                               torch.nn.functional.linear(x, w, b), rtol=1e-4, atol=1e-4)
    best = float("inf")
    for _ in range(7):
        t = time.perf_counter_ns()
        for _ in range(calls):
            torch.ops.mkldnn._linear_pointwise(x, wp, b, "none", [], "")
        best = min(best, (time.perf_counter_ns() - t) / calls / 1e3)
print("CALL", best)
"""


def _child(shape: str, calls: int, verbose: bool) -> str:
    env = dict(os.environ, ONEDNN_VERBOSE="1" if verbose else "0", OMP_NUM_THREADS="1")
    return subprocess.run([sys.executable, "-c", _CHILD, shape, str(calls)], env=env,
                          capture_output=True, text=True, check=True).stdout


def _ort_us(m: int, k: int, n: int, calls: int) -> float | None:
    try:
        import time

        import numpy as np
        import onnx
        import onnxruntime as ort
        from onnx import TensorProto, helper
    except ImportError:
        return None
    rng = np.random.default_rng(0)
    w = rng.standard_normal((n, k), dtype=np.float32)
    b = rng.standard_normal(n, dtype=np.float32)
    graph = helper.make_graph(
        [helper.make_node("Gemm", ["x", "w", "b"], ["y"], transB=1)], "gemm",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [m, k])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [m, n])],
        [onnx.numpy_helper.from_array(w, "w"), onnx.numpy_helper.from_array(b, "b")])
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = opts.inter_op_num_threads = 1
    sess = ort.InferenceSession(helper.make_model(graph).SerializeToString(), opts,
                                providers=["CPUExecutionProvider"])
    feed = {"x": rng.standard_normal((m, k), dtype=np.float32)}
    best = float("inf")
    for _ in range(7):
        t = time.perf_counter_ns()
        for _ in range(calls):
            sess.run(None, feed)
        best = min(best, (time.perf_counter_ns() - t) / calls / 1e3)
    return best


@click.command()
@click.option("--shapes", default=SHAPES, show_default=True, help="M×K×N products.")
@click.option("--calls", default=200, show_default=True, help="Calls per timed sample.")
def main(shapes: str, calls: int) -> None:
    """Time oneDNN's calls against its primitive's own execution; see the module docstring."""
    print("| M×K×N | call µs | primitive µs (oneDNN's log) | around it µs | ORT Gemm µs |")
    print("|---|--:|--:|--:|--:|")
    for shape in shapes.split(","):
        call = float(_child(shape, calls, False).split("CALL")[1])
        m, k, n = map(int, shape.split("x"))
        pattern = re.compile(rf"inner_product,.*mb{m}ic{k}oc{n},([0-9.]+)$")
        execs = [float(g.group(1)) * 1e3 for line in _child(shape, 50, True).splitlines()
                 if (g := pattern.search(line.strip()))]
        prim = statistics.median(execs)
        ort_us = _ort_us(m, k, n, calls)
        ort_text = f"{ort_us:.1f}" if ort_us is not None else "—"
        print(f"| {shape} | {call:.1f} | {prim:.1f} | {call - prim:.1f} | {ort_text} |")


if __name__ == "__main__":
    main()
