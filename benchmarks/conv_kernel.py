"""Our convolution kernel (``sr_conv2d_block`` of ``ops/ckernels/gemm.c``: an implicit GEMM over
output pixels) against its source at another git revision and against ATen's ``conv2d``
(oneDNN for a channels-last input), in one process, one thread.

A kernel change is timed against the old source built beside it (``kernel_builds``): per
shape, rounds alternate the two builds and ATen, the order reversed every other round;
medians of the rounds. Both builds must give the same bits, and agree with ATen. The shapes
are the 3 × 3 convolutions of the zoo's conv nets (``resnet_tiny``, ``unet_tiny``) at batch
1, 4 and 8, a few wider ones, and ``tcn``'s dilated 1-D convolutions.

    python benchmarks/conv_kernel.py --base HEAD~1
    python benchmarks/conv_kernel.py --base c9ddec8 --rounds 40
"""

from __future__ import annotations

import array
import ctypes
import sys
import tempfile
from pathlib import Path

import click
import torch
from rich.console import Console
from rich.table import Table

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # (run as a script)
    sys.path.insert(0, str(ROOT))

from benchmarks.kernel_builds import alternate, build, sources

#: (batch, in channels, height, width, out channels, kernel (KH, KW), stride, padding (PH, PW),
#: dilation (DH, DW), channels-last input): the 3 × 3 convolutions of the zoo's conv nets, a
#: few wider ones, and the temporal conv net's dilated 1-D ones (height 1, channels-first, as
#: ``conv1d`` runs them)
SHAPES = [
    (1, 32, 16, 16, 32, (3, 3), 1, (1, 1), (1, 1), True),
    (1, 64, 8, 8, 64, (3, 3), 1, (1, 1), (1, 1), True),
    (1, 16, 32, 32, 16, (3, 3), 1, (1, 1), (1, 1), True),
    (4, 16, 32, 32, 16, (3, 3), 1, (1, 1), (1, 1), True),
    (4, 32, 16, 16, 32, (3, 3), 1, (1, 1), (1, 1), True),
    (4, 64, 8, 8, 64, (3, 3), 1, (1, 1), (1, 1), True),
    (4, 16, 32, 32, 32, (3, 3), 2, (1, 1), (1, 1), True),
    (8, 32, 8, 8, 64, (3, 3), 1, (1, 1), (1, 1), True),
    (8, 64, 8, 8, 64, (3, 3), 1, (1, 1), (1, 1), True),
    (8, 64, 16, 16, 32, (3, 3), 1, (1, 1), (1, 1), True),
    (8, 32, 32, 32, 16, (3, 3), 1, (1, 1), (1, 1), True),
    (8, 3, 32, 32, 16, (3, 3), 1, (1, 1), (1, 1), False),
    (2, 32, 16, 16, 96, (3, 3), 1, (1, 1), (1, 1), True),
    (1, 128, 8, 8, 128, (3, 3), 1, (1, 1), (1, 1), True),
    (8, 32, 1, 130, 32, (1, 3), 1, (0, 0), (1, 1), False),
    (8, 32, 1, 144, 32, (1, 3), 1, (0, 0), (1, 8), False),
    (1, 32, 1, 144, 32, (1, 3), 1, (0, 0), (1, 8), False),
]
FILES = ("gemm.c", "act.h")


def _build(rev: str | None, where: Path) -> ctypes.CDLL:
    lib = build(sources(FILES, rev), "gemm.c", where)
    p, i64 = ctypes.c_void_p, ctypes.c_int64
    lib.sr_conv2d_block.restype = ctypes.c_int
    lib.sr_conv2d_block.argtypes = [p, p, p]
    lib.sr_gemm_pack.argtypes = [p, i64, i64, i64, p]
    lib.sr_gemm_nr.restype = i64
    return lib


def _call(lib: ctypes.CDLL, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor,
          stride: int, padding: tuple, dilation: tuple, out: torch.Tensor):
    """``() -> None``: the kernel of ``lib`` writing relu(conv2d(x, weight, bias)) into
    ``out`` (channels-last), the weight packed by that build."""
    n, cin, h, w = x.shape
    cout, _, kh, kw = weight.shape
    channels_first = not x.is_contiguous(memory_format=torch.channels_last)
    matrix = weight.permute(2, 1, 3, 0) if channels_first else weight.permute(2, 3, 1, 0)
    matrix = matrix.reshape(-1, cout).contiguous()
    nr = lib.sr_gemm_nr()
    cols = -(-cout // nr) * nr
    packed = torch.empty(cols * matrix.shape[0])
    lib.sr_gemm_pack(matrix.data_ptr(), cout, matrix.shape[0], cout, packed.data_ptr())
    padded = torch.zeros(cols)
    padded[:cout] = bias
    oh, ow = out.shape[2:]
    block = array.array("q", [packed.data_ptr(), padded.data_ptr(), n, h, w, cin, kh, kw,
                              stride, stride, *padding, *dilation, oh, ow, cout, 1,
                              int(channels_first)])
    run, address, keep = lib.sr_conv2d_block, block.buffer_info()[0], (packed, padded, block)

    def call() -> None:
        run(x.data_ptr(), out.data_ptr(), address)

    call.keep = keep  # type: ignore[attr-defined]
    return call


def _time_shape(libs: dict[str, ctypes.CDLL], shape: tuple, rounds: int) -> dict[str, float]:
    n, cin, h, w, cout, kernel, stride, padding, dilation, channels_last = shape
    x = torch.randn(n, cin, h, w)
    if channels_last:
        x = x.contiguous(memory_format=torch.channels_last)
    weight = torch.randn(cout, cin, *kernel) / (kernel[0] * kernel[1] * cin) ** 0.5
    bias = torch.randn(cout)
    expected = torch.relu(torch.conv2d(x, weight, bias, stride, padding, dilation))
    outs = {name: torch.empty_like(expected, memory_format=torch.channels_last)
            for name in libs}
    calls = {name: _call(lib, x, weight, bias, stride, padding, dilation, outs[name])
             for name, lib in libs.items()}
    calls["aten"] = lambda: torch.relu_(torch.conv2d(x, weight, bias, stride, padding,
                                                     dilation))
    flops = 2 * expected.numel() * cin * kernel[0] * kernel[1]
    medians = alternate(calls, rounds, max(1, int(4e6 // flops)))
    if not torch.equal(outs["base"], outs["ours"]):
        raise SystemExit(f"{shape}: the two builds disagree")
    torch.testing.assert_close(outs["ours"], expected, rtol=1e-4, atol=1e-4)
    return medians


@click.command()
@click.option("--base", default="HEAD~1", show_default=True,
              help="the git revision whose gemm.c is the baseline")
@click.option("--rounds", default=30, show_default=True)
def main(base: str, rounds: int) -> None:
    torch.set_num_threads(1)
    torch.manual_seed(0)
    with tempfile.TemporaryDirectory() as d1, tempfile.TemporaryDirectory() as d2, \
            torch.inference_mode():
        libs = {"base": _build(base, Path(d1)), "ours": _build(None, Path(d2))}
        table = Table(title=f"convolution + bias + relu, µs a call (one thread; medians "
                            f"of {rounds} rounds): this tree against {base}")
        for col in ("N × Cin × H × W → Cout", "kernel, stride, dilation", base, "this tree",
                    "÷ base", "ATen conv2d", "÷ ATen"):
            table.add_column(col, justify="right")
        ratios = []
        for shape in SHAPES:
            n, cin, h, w, cout, kernel, stride, _, dilation, channels_last = shape
            m = _time_shape(libs, shape, rounds)
            ratios.append(m["ours"] / m["base"])
            table.add_row(f"{n}×{cin}×{h}×{w} → {cout}" + ("" if channels_last else " (NCHW)"),
                          f"{kernel[0]}×{kernel[1]}, {stride}, {dilation[0]}×{dilation[1]}",
                          f"{m['base']:.1f}", f"{m['ours']:.1f}", f"{ratios[-1]:.2f}",
                          f"{m['aten']:.1f}", f"{m['ours'] / m['aten']:.2f}")
        Console(width=140).print(table)
        geomean = torch.tensor(ratios).log().mean().exp().item()
        print(f"geomean this tree ÷ {base}: {geomean:.3f}")


if __name__ == "__main__":
    main()
