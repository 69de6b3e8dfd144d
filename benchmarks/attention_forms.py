"""Written-out attention against ``scaled_dot_product_attention``, per mask form (issue 19).

``static_runtime::attention`` and ``static_runtime::masked_attention`` (``passes/fusion.py``)
run either the operators they replaced or PyTorch's fused kernel, whichever this benchmark
measured faster for the shape. For each (batch × heads, query length = key length, head
size) of the grid and each form, the two are timed in alternation, one thread, inference
mode: µs per call. Query, key and value are laid out as ``--layout`` says: ``projection``
(views of ``(batch, L, heads, d)`` projections, as attention straight after its linears
sees them) or ``contiguous`` (``(batch, heads, L, d)`` tensors, as after rotary embeddings or
repeated key-value heads); the key is transposed as a view either way., the median of ``--repeats`` samples of ``--calls`` calls each.

Forms (``s = q·kᵀ · scale``; the mask is (L, L), broadcast over batch and heads):

* ``none``   ``softmax(s) · v``
* ``add``    ``softmax(s + mask) · v``, a float causal mask (0 / -inf); the fused side also
  pays for the check that no row is entirely -inf (``isneginf(amax(mask, -1)).any()``), where
  the two differ (NaN written out, 0 from the fused kernel)
* ``bool``   ``softmax(s.masked_fill(mask, -inf)) · v``; the fused side pays for
  ``logical_not`` of the mask and the same check

Run::

    python benchmarks/attention_forms.py              # ~3 minutes
    python benchmarks/attention_forms.py --layout contiguous
    python benchmarks/attention_forms.py --repeats 15 --calls 100
"""

from __future__ import annotations

import statistics
import time

import click
import torch

F = torch.nn.functional

#: (batch × heads as (batch, heads), length, head size): the zoo's attention shapes and a grid
#: around them.
SHAPES = [(b, h, n, d) for (b, h) in ((1, 2), (1, 4), (2, 4), (4, 4), (8, 4), (8, 8))
          for n in (8, 16, 32, 64) for d in (16, 32, 64)]


def _forms(b: int, h: int, n: int, d: int, layout: str):
    g = torch.Generator().manual_seed(0)
    # the key is transposed as a view (a contiguous key_t costs the fused kernel a copy)
    if layout == "projection":
        q, k, v = (torch.randn(b, n, h, d, generator=g).transpose(1, 2) for _ in range(3))
    else:
        q, k, v = (torch.randn(b, h, n, d, generator=g) for _ in range(3))
    k_t = k.transpose(-1, -2)
    add_mask = torch.full((n, n), float("-inf")).triu(1)
    bool_mask = torch.ones(n, n, dtype=torch.bool).triu(1)
    scale = d ** -0.5
    mm, softmax, sdpa = torch.matmul, torch.softmax, F.scaled_dot_product_attention
    isneginf = torch.isneginf

    def written(mask_op):
        return lambda: mm(softmax(mask_op(mm(q, k_t) * scale), -1), v)

    def fused_none():
        return sdpa(q, k_t.transpose(-2, -1), v, scale=scale)

    def fused_add():
        if bool(isneginf(torch.amax(add_mask, -1)).any()):
            raise AssertionError
        return sdpa(q, k_t.transpose(-2, -1), v, attn_mask=add_mask, scale=scale)

    def fused_bool():
        if bool(bool_mask.all(-1).any()):
            raise AssertionError
        return sdpa(q, k_t.transpose(-2, -1), v, attn_mask=bool_mask.logical_not(), scale=scale)

    return {
        "none": (written(lambda s: s), fused_none),
        "add": (written(lambda s: s + add_mask), fused_add),
        "bool": (written(lambda s: s.masked_fill(bool_mask, float("-inf"))), fused_bool),
    }


def _time(fns, calls: int, repeats: int) -> list[float]:
    samples: list[list[float]] = [[] for _ in fns]
    for f in fns:
        for _ in range(5):
            f()
    for r in range(repeats):
        order = list(enumerate(fns)) if r % 2 == 0 else list(reversed(list(enumerate(fns))))
        for i, f in order:
            t0 = time.perf_counter()
            for _ in range(calls):
                f()
            samples[i].append((time.perf_counter() - t0) / calls * 1e6)
    return [statistics.median(s) for s in samples]


@click.command()
@click.option("--calls", default=40, show_default=True)
@click.option("--repeats", default=9, show_default=True)
@click.option("--layout", type=click.Choice(["projection", "contiguous"]), default="projection",
              show_default=True)
def main(calls: int, repeats: int, layout: str) -> None:
    torch.set_num_threads(1)
    print("| batch × heads | L | d | form | written µs | fused µs | fused ÷ written |")
    print("|---|--:|--:|---|--:|--:|--:|")
    with torch.inference_mode():
        for b, h, n, d in SHAPES:
            for form, (written, fused) in _forms(b, h, n, d, layout).items():
                w, f = _time([written, fused], calls, repeats)
                print(f"| {b} × {h} | {n} | {d} | {form} | {w:.1f} | {f:.1f} | {f / w:.2f} |",
                      flush=True)


if __name__ == "__main__":
    main()
