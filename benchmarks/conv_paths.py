"""Which kernel should run a depthwise or a dilated 1-D convolution on this CPU (issue 19
item 3)? Every path PyTorch offers, timed side by side in one process, one thread, µs of the
thread's CPU time per call (median of ``--repeats`` alternating samples), beside ONNX
Runtime's single ``Conv``:

* ``aten``        ``conv2d``/``conv1d`` on the NCHW (NCL) input, as eager runs it
* ``aten_cl``     ``conv2d`` on a channels-last input and weight
* ``onednn_cl``   ``mkldnn._convolution_pointwise`` on a weight reordered once, channels-last
  input (what ``conv2d_pointwise`` runs); for 1-D, on the (N, C, 1, L) view of the NCL input
* ``inductor``    ``torch.compile`` of the convolution (Inductor calls an external conv)
* ``inductor_sum``  ``torch.compile`` of the depthwise convolution written as a sum of
  k × k shifted slices times per-channel weights, which Inductor fuses into one C++ loop
  (2-D, stride 1 only)
* ``ORT``         a one-node ONNX ``Conv`` in an ONNX Runtime session on bound inputs

Shapes: the depthwise convolutions of the zoo's conv nets (EfficientNet 3 × 3 / 5 × 5,
ConvNeXt 7 × 7, MobileNet 3 × 3) and the TCN's dilated ``conv1d``\\ s.

    python benchmarks/conv_paths.py                 # ~2 min (Inductor compiles)
    python benchmarks/conv_paths.py --no-inductor
"""

from __future__ import annotations

import statistics
import sys
import time
import warnings
from pathlib import Path

import click
import torch
import torch.nn.functional as F

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

#: (channels, size, kernel, stride) of depthwise 2-D convolutions
DEPTHWISE = [(64, 8, 3, 1), (96, 8, 7, 1), (48, 16, 7, 1), (96, 16, 5, 2), (144, 8, 5, 1)]
#: (in, out, length, kernel, dilation) of 1-D convolutions (padding (k - 1) · d)
CONV1D = [(8, 32, 128, 3, 1), (32, 32, 128, 3, 1), (32, 32, 128, 3, 2), (32, 32, 128, 3, 8),
          (8, 32, 128, 1, 1)]


def _sample(fn, calls: int) -> float:
    """µs per call of the calling thread's CPU time (both torch and ORT compute on it with one
    thread), so that other processes holding the core do not count."""
    start = time.thread_time()
    for _ in range(calls):
        fn()
    return (time.thread_time() - start) / calls * 1e6


def _time_all(fns: dict, repeats: int, sample_ms: float) -> dict[str, float]:
    calls = {}
    for k, fn in fns.items():
        for _ in range(5):
            fn()
        calls[k] = max(5, min(2000, round(sample_ms * 1e3 / max(_sample(fn, 5), 0.5))))
    samples: dict[str, list[float]] = {k: [] for k in fns}
    for _ in range(repeats):
        for k, fn in fns.items():
            samples[k].append(_sample(fn, calls[k]))
    return {k: statistics.median(v) for k, v in samples.items()}


def _shifted_sum(weight, bias, k: int, p: int, out: int):
    c = weight.shape[0]
    taps = [weight[:, 0, i, j].reshape(1, c, 1, 1) for i in range(k) for j in range(k)]
    b = bias.reshape(1, c, 1, 1)

    def dw(t):
        tp = F.pad(t, (p, p, p, p))
        acc = b
        for i in range(k):
            for j in range(k):
                acc = acc + tp[:, :, i:i + out, j:j + out] * taps[i * k + j]
        return acc

    return dw


def depthwise_row(c, size, k, s, repeats, sample_ms, inductor, ort):
    from benchmarks.kernels import _ort_conv

    cl = torch.channels_last
    g = torch.Generator().manual_seed(c * size + k)
    x = torch.randn(1, c, size, size, generator=g)
    xc = x.contiguous(memory_format=cl)
    w, b, p = torch.randn(c, 1, k, k, generator=g), torch.randn(c, generator=g), k // 2
    wc = w.contiguous(memory_format=cl)
    packed = torch.ops.mkldnn._reorder_convolution_weight(w, [p, p], [s, s], [1, 1], c)
    pointwise = torch.ops.mkldnn._convolution_pointwise.default
    expected = F.conv2d(x, w, b, s, p, 1, c)
    fns = {
        "aten": lambda: F.conv2d(x, w, b, s, p, 1, c),
        "aten_cl": lambda: F.conv2d(xc, wc, b, s, p, 1, c),
        "onednn_cl": lambda: pointwise(xc, packed, b, [p, p], [s, s], [1, 1], c, "none", [],
                                       ""),
    }
    if inductor:
        compiled = torch.compile(lambda t: F.conv2d(t, w, b, s, p, 1, c), dynamic=False)
        fns["inductor"] = lambda: compiled(xc)
        if s == 1:
            summed = torch.compile(_shifted_sum(w, b, k, p, size), dynamic=False)
            fns["inductor_sum"] = lambda: summed(xc)
    if ort:
        run, _ = _ort_conv(x, w, b, [s, s], [p, p], [1, 1], c, "none", list(expected.shape))
        fns["ORT"] = run
    for name, fn in fns.items():
        if name != "ORT":
            torch.testing.assert_close(fn(), expected, rtol=1e-4, atol=1e-4, msg=name)
    return _time_all(fns, repeats, sample_ms)


def conv1d_row(cin, cout, length, k, d, repeats, sample_ms, inductor, ort):
    from benchmarks.kernels import _ort_session

    g = torch.Generator().manual_seed(cin * length + k * d)
    x = torch.randn(1, cin, length, generator=g)
    w, b, p = torch.randn(cout, cin, k, generator=g), torch.randn(cout, generator=g), (k - 1) * d
    packed = torch.ops.mkldnn._reorder_convolution_weight(w.unsqueeze(2), [0, p], [1, 1],
                                                          [1, d], 1)
    pointwise = torch.ops.mkldnn._convolution_pointwise.default
    expected = F.conv1d(x, w, b, 1, p, d)
    fns = {
        "aten": lambda: F.conv1d(x, w, b, 1, p, d),
        "onednn_cl": lambda: pointwise(x.unsqueeze(2), packed, b, [0, p], [1, 1], [1, d], 1,
                                       "none", [], "").squeeze(2),
    }
    if inductor:
        compiled = torch.compile(lambda t: F.conv1d(t, w, b, 1, p, d), dynamic=False)
        fns["inductor"] = lambda: compiled(x)
    if ort:
        from onnx import helper, numpy_helper

        node = helper.make_node("Conv", ["X", "W", "B"], ["Y"], kernel_shape=[k], pads=[p, p],
                                dilations=[d])
        inits = [numpy_helper.from_array(w.numpy(), "W"), numpy_helper.from_array(b.numpy(), "B")]
        run, _ = _ort_session([node], inits, x, list(expected.shape))
        fns["ORT"] = run
    for name, fn in fns.items():
        if name != "ORT":
            torch.testing.assert_close(fn(), expected, rtol=1e-4, atol=1e-4, msg=name)
    return _time_all(fns, repeats, sample_ms)


@click.command()
@click.option("--repeats", default=9, show_default=True)
@click.option("--sample-ms", default=10.0, show_default=True)
@click.option("--no-inductor", is_flag=True)
@click.option("--no-ort", is_flag=True)
def main(repeats: int, sample_ms: float, no_inductor: bool, no_ort: bool) -> None:
    torch.set_num_threads(1)
    warnings.simplefilter("ignore")
    cols = ["aten", "aten_cl", "onednn_cl", "inductor", "inductor_sum", "ORT"]
    print(f"1 thread, batch 1, µs per call (median of {repeats})")
    print(f"{'convolution':<30}" + "".join(f"{c:>13}" for c in cols))
    with torch.inference_mode():
        for c, size, k, s in DEPTHWISE:
            r = depthwise_row(c, size, k, s, repeats, sample_ms, not no_inductor, not no_ort)
            print(f"{f'dw {c}ch {size}x{size} {k}x{k} s{s}':<30}"
                  + "".join(f"{r[c_]:>13.1f}" if c_ in r else f"{'-':>13}" for c_ in cols),
                  flush=True)
        for cin, cout, length, k, d in CONV1D:
            r = conv1d_row(cin, cout, length, k, d, repeats, sample_ms, not no_inductor,
                           not no_ort)
            print(f"{f'conv1d {cin}->{cout} L{length} k{k} d{d}':<30}"
                  + "".join(f"{r[c_]:>13.1f}" if c_ in r else f"{'-':>13}" for c_ in cols),
                  flush=True)


if __name__ == "__main__":
    main()
