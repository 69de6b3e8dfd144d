"""Our attention kernel (``ops/ckernels/attention.c``) against its source at another git
revision and against PyTorch's ``scaled_dot_product_attention``, in one process.

This machine's speed moves by up to 2 × between runs a minute apart (the Xeon of sessions
20–23), so a kernel change is timed against the old source built beside it (with the flags
the runtime builds with) and loaded into the same process: per shape, rounds alternate the
two builds (and ATen), the order reversed every other round; medians of the rounds. Both
builds must give the same bits.

    python benchmarks/attention_kernel.py --base HEAD~1
    python benchmarks/attention_kernel.py --base 84401ca --rounds 40
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

#: (batch, heads, length, head size): a small text encoder's heads, BERT-base's, a 128 head
SHAPES = [(1, 2, 16, 64), (1, 2, 32, 64), (1, 2, 128, 64), (1, 2, 256, 64), (1, 12, 128, 64),
          (4, 4, 64, 32), (1, 8, 64, 128)]
FILES = ("attention.c", "act.h")


def _build(rev: str | None, where: Path) -> ctypes.CDLL:
    lib = build(sources(FILES, rev), "attention.c", where)
    p = ctypes.c_void_p
    lib.sr_attention.restype = ctypes.c_int
    lib.sr_attention.argtypes = [p, p, p, p, p, p, ctypes.c_float, p]
    return lib


def _time_shape(libs: dict[str, ctypes.CDLL], shape: tuple[int, int, int, int],
                rounds: int) -> dict[str, float]:
    """Median µs a call of each build and of ATen's sdpa at ``shape`` (B, H, L, D), checking
    that the builds give the same bits and agree with ATen."""
    B, H, L, D = shape
    sdpa = torch.nn.functional.scaled_dot_product_attention
    q, k, v = (torch.randn(B, H, L, D) for _ in range(3))
    mask = torch.randn(1, 1, L, L)
    outs = {name: torch.empty(B, H, L, D) for name in libs}
    block = array.array("q", [B, H, L, L, D, D, 1, 0, *([H * L * D, L * D, D] * 4),
                              0, 0, L, 1, 0])
    address = block.buffer_info()[0]

    def ours(name: str):
        run, out = libs[name].sr_attention, outs[name].data_ptr()
        return lambda: run(q.data_ptr(), k.data_ptr(), v.data_ptr(), mask.data_ptr(), None,
                           out, 0.125, address)

    medians = alternate({"base": ours("base"), "ours": ours("ours"),
                         "aten": lambda: sdpa(q, k, v, attn_mask=mask, scale=0.125)},
                        rounds, max(1, 2000 // L))
    if not torch.equal(outs["base"], outs["ours"]):
        raise SystemExit(f"{shape}: the two builds disagree")
    torch.testing.assert_close(outs["ours"], sdpa(q, k, v, attn_mask=mask, scale=0.125),
                               rtol=1e-4, atol=1e-5)
    return medians


@click.command()
@click.option("--base", default="HEAD~1", show_default=True,
              help="the git revision whose attention.c is the baseline")
@click.option("--rounds", default=30, show_default=True)
def main(base: str, rounds: int) -> None:
    torch.set_num_threads(1)
    torch.manual_seed(0)
    with tempfile.TemporaryDirectory() as d1, tempfile.TemporaryDirectory() as d2:
        libs = {"base": _build(base, Path(d1)), "ours": _build(None, Path(d2))}
        table = Table(title=f"attention, additive mask, µs a call (one thread; medians of "
                            f"{rounds} rounds): this tree against {base}")
        for col in ("B, H, L, D", base, "this tree", "÷ base", "ATen sdpa", "÷ ATen"):
            table.add_column(col, justify="right")
        for shape in SHAPES:
            m = _time_shape(libs, shape, rounds)
            table.add_row(", ".join(map(str, shape)), f"{m['base']:.1f}", f"{m['ours']:.1f}",
                          f"{m['ours'] / m['base']:.2f}", f"{m['aten']:.1f}",
                          f"{m['ours'] / m['aten']:.2f}")
        Console(width=140).print(table)


if __name__ == "__main__":
    main()
