"""Our small kernels against PyTorch's, one operator at a time: attention
(``ckernels/attention.c`` against ``scaled_dot_product_attention``) at the head shapes the zoo's
transformers serve, standalone activations (``ckernels/eltwise.c`` against ATen's GELU,
tanh, sigmoid, SiLU) over element counts, and L2 normalisation (``norms.c`` against
``nn.functional.normalize``).

Each case is timed in alternation, one thread, µs per call: the median of ``--repeats``
samples of enough calls to fill ``--sample-ms``. Ours is called as the measured nodes call it
(its unchecked call, allocating its result). ``ours ÷ PyTorch`` below 1: ours is faster.
Which kernel a model runs is decided on the user's machine by measurement; these figures say
why ours is a candidate, not that it always wins.

    python benchmarks/small_kernels.py                     # ~10 s
    python benchmarks/small_kernels.py --only attention --json small.json
"""

from __future__ import annotations

import json
import math
import statistics
import time
from collections.abc import Callable
from pathlib import Path

import click
import torch
import torch.nn.functional as F
from rich.console import Console
from rich.table import Table

from static_runtime.ops import ckernels
from static_runtime.ops.ckernels.layers import l2_normalize

#: (batch, heads, query length, key length, head size, mask): shapes the zoo's models run
#: (T5 / BART at batch 4, BERT at batch 1 and 8, LLaMA's causal heads, ViT's 65 patches)
ATTENTION = [
    (4, 4, 24, 24, 16, "float"), (4, 4, 12, 24, 16, "float"), (1, 4, 32, 32, 32, "none"),
    (1, 4, 32, 32, 32, "causal"), (1, 12, 128, 128, 64, "padding"),
    (8, 12, 128, 128, 64, "padding"), (8, 4, 65, 65, 32, "none"),
]
ACTIVATIONS = ["gelu", "gelu_tanh", "tanh", "sigmoid", "silu"]
COUNTS = [64, 1024, 16384, 65536]


def _time(fns: dict[str, Callable[[], object]], repeats: int, sample_ms: float
          ) -> dict[str, float]:
    for fn in fns.values():
        fn()
    calls = {}
    for name, fn in fns.items():
        t0, n = time.perf_counter(), 0
        while time.perf_counter() - t0 < sample_ms / 1e3 or n < 3:
            fn()
            n += 1
        calls[name] = n
    samples: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(repeats):
        for name, fn in fns.items():
            n = calls[name]
            t0 = time.perf_counter()
            for _ in range(n):
                fn()
            samples[name].append((time.perf_counter() - t0) / n * 1e6)
    return {name: statistics.median(s) for name, s in samples.items()}


def _attention_case(b, h, lq, lk, d, mask_kind):
    g = torch.Generator().manual_seed(b * h + lq)
    x = torch.randn(b, max(lq, lk), 3 * h * d, generator=g)
    q = x[:, :lq, :h * d].reshape(b, lq, h, d).transpose(1, 2)  # views of a projection
    k = x[:, :lk, h * d:2 * h * d].reshape(b, lk, h, d).transpose(1, 2)
    v = x[:, :lk, 2 * h * d:].reshape(b, lk, h, d).transpose(1, 2)
    mask, causal = None, mask_kind == "causal"
    if mask_kind == "float":
        mask = torch.randn(b, h, lq, lk, generator=g)
    elif mask_kind == "padding":
        mask = torch.zeros(b, 1, 1, lk)
        mask[..., -3:] = float("-inf")
    expected = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=causal)
    strides = [s if size > 1 else 0 for s, size in zip(
        mask.stride(), mask.shape, strict=True)] if mask is not None else [0, 0, 0, 0]
    strides = [0] * (4 - len(strides)) + strides
    array, address = ckernels._block(
        b, h, lq, lk, d, d, 1, int(causal), *q.stride()[:3], *k.stride()[:3],
        *v.stride()[:3], *expected.stride()[:3], *strides, 0)
    run = ckernels.library().sr_attention
    shape, out_strides = tuple(expected.shape), expected.stride()
    fptr = None if mask is None else mask.data_ptr()

    def ours():
        out = torch.empty_strided(shape, out_strides)
        run(q.data_ptr(), k.data_ptr(), v.data_ptr(), fptr, None, out.data_ptr(),
            1 / math.sqrt(d), address)
        return out

    torch.testing.assert_close(ours(), expected, rtol=1e-4, atol=1e-5)
    ours.keep = array  # type: ignore[attr-defined]
    return {"PyTorch": lambda: F.scaled_dot_product_attention(q, k, v, attn_mask=mask,
                                                              is_causal=causal),
            "ours": ours}


def _activation_case(act: str, n: int):
    x = torch.randn(n) * 3
    pytorch = {"gelu": F.gelu, "gelu_tanh": lambda t: F.gelu(t, approximate="tanh"),
               "tanh": torch.tanh, "sigmoid": torch.sigmoid, "silu": F.silu}[act]
    run, code = ckernels.library().sr_activation, ckernels.ACTIVATIONS[act]

    def ours():
        out = torch.empty(n)
        run(x.data_ptr(), out.data_ptr(), n, code)
        return out

    torch.testing.assert_close(ours(), pytorch(x), rtol=2e-6, atol=2e-6)
    return {"PyTorch": lambda: pytorch(x), "ours": ours}


def _normalize_case(rows: int, h: int):
    x = torch.randn(rows, h)
    direct = l2_normalize(h, 1e-12).direct_for(x.shape)
    torch.testing.assert_close(direct(x), F.normalize(x, dim=-1))
    return {"PyTorch": lambda: F.normalize(x, dim=-1), "ours": lambda: direct(x)}


@click.command()
@click.option("--only", type=click.Choice(["attention", "activations", "normalize"]),
              multiple=True, help="Run these groups only (default: all).")
@click.option("--repeats", default=11, show_default=True)
@click.option("--sample-ms", default=5.0, show_default=True)
@click.option("--json", "json_out", type=click.Path(dir_okay=False), default=None)
def main(only, repeats, sample_ms, json_out):
    if not ckernels.available():
        raise click.ClickException(f"our kernels are not available: "
                                   f"{ckernels.why_unavailable()}")
    torch.set_num_threads(1)
    groups = set(only) or {"attention", "activations", "normalize"}
    cases: list[tuple[str, str, dict]] = []
    if "attention" in groups:
        cases += [("attention", f"B{b} H{h} Lq{lq} Lk{lk} D{d} {m}", _attention_case(
            b, h, lq, lk, d, m)) for b, h, lq, lk, d, m in ATTENTION]
    if "activations" in groups:
        cases += [("activation", f"{act} n={n}", _activation_case(act, n))
                  for act in ACTIVATIONS for n in COUNTS]
    if "normalize" in groups:
        cases += [("l2 normalize", f"{r} × {h}", _normalize_case(r, h))
                  for r, h in ((1, 32), (64, 32), (8, 384))]
    table = Table(title="Our small kernels against PyTorch's: µs per call, one thread")
    for col in ("kernel", "case", "PyTorch", "ours", "ours ÷ PyTorch"):
        table.add_column(col, justify="left" if col in ("kernel", "case") else "right")
    rows = []
    with torch.inference_mode():
        for group, name, fns in cases:
            t = _time(fns, repeats, sample_ms)
            ratio = t["ours"] / t["PyTorch"]
            rows.append({"kernel": group, "case": name, "pytorch_us": t["PyTorch"],
                         "ours_us": t["ours"], "ratio": ratio})
            table.add_row(group, name, f"{t['PyTorch']:.1f}", f"{t['ours']:.1f}",
                          f"{ratio:.2f}")
    Console().print(table)
    if json_out:
        Path(json_out).write_text(json.dumps({"torch": torch.__version__, "rows": rows},
                                             indent=1))


if __name__ == "__main__":
    main()
