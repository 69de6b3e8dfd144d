"""``static_runtime::rotary(x, cos, sin, half, dim, cat_dim)`` (``passes/rotary.py``:
LLaMA's ``q * cos + rotate_half(q) * sin``) means ``x * cos + cat([-x.slice(dim, half),
x.slice(dim, 0, half)], cat_dim) * sin``. Its kernel is chosen by measurement
(``ops/kernels.py``) per thread count, row length and count of rows (up to the same power of
two), between

* ``aten``: the composite, six operators (the default);
* ``native``: ``x * cos`` by ATen (so the result has the memory layout eager gives it: a
  permuted query's, or a row-major one where a dimension of 1 makes the order ambiguous),
  then our loop (``ops/ckernels/eltwise.c``, ``sr_rotary_add``) adding the rotated half
  times ``sin`` into it in one pass, each product rounded before the sum as the operators
  round it — the same bits;

for float32 CPU tensors of up to four dimensions whose last dimension is unit-stride, ``sin``
and ``cos`` broadcasting to ``x``'s shape, ``dim`` and ``cat_dim`` both its last dimension and
``0 < half < d``; anything else runs the composite.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from static_runtime.ir.graph import Node
from static_runtime.ir.own_ops import ROTARY
from static_runtime.ops import ckernels
from static_runtime.ops.kernels import KernelChooser, PerShape, size_bucket
from static_runtime.ops.registry import (
    SHAPE_MEANINGS,
    implement_torch_ops,
    labelled,
    register_measured,
    register_native,
)
from static_runtime.ops.strides import (
    broadcasts_into,
    dense_strides,
    is_dense,
    iterator_strides,
)

_slice = torch.ops.aten.slice.Tensor


def rotary_reference(x, cos, sin, half, dim, cat_dim):
    """What ``static_runtime::rotary`` means: the operators it replaced, in their order."""
    rotated = torch.cat([-_slice(x, dim, half, None), _slice(x, dim, 0, half)], cat_dim)
    return x * cos + rotated * sin


def rotary_shapes(x, cos, sin, half, dim, cat_dim):
    """``rotary_reference``'s result metadata, for shape programs: where ``x`` is dense
    (every element once, no gaps: a permutation of a row-major tensor) and ``cos`` and
    ``sin`` of its dtype broadcast into its shape, a tensor laid out as ``x`` (the first
    product follows its first operand's order, and it decides the sum's; the rotated half is
    row-major); else the reference's (under a shape program it decomposes: ~9 ms a node)."""
    if cos.dtype == sin.dtype == x.dtype and x.is_floating_point() \
            and broadcasts_into(cos.shape, x.shape) and broadcasts_into(sin.shape, x.shape) \
            and is_dense(x.shape, x.stride()):
        return torch.empty_like(x)
    return rotary_reference(x, cos, sin, half, dim, cat_dim)


SHAPE_MEANINGS["static_runtime::rotary"] = rotary_shapes


@register_native("static_runtime::rotary")
def _native(node: Node):
    if node.schema != ROTARY:
        return None
    return labelled("x * cos + cat([-x.slice(dim, half), x.slice(dim, 0, half)], cat_dim) "
                    "* sin")(rotary_reference)


def _block(out: torch.Tensor, x: torch.Tensor, sin: torch.Tensor, half: int):
    """``sr_rotary_add``'s argument block for these tensors (``sin`` expanded to ``x``'s
    shape), or None where the loop does not apply."""
    lead = 4 - x.dim()
    sizes = (1,) * lead + tuple(x.shape)
    strides = [(0,) * lead + tuple(t.stride()) for t in (out, x, sin)]
    if any(s[3] != 1 for s in strides):
        return None
    return ckernels._block(*sizes, *(s[k] for s in strides for k in range(3)), sizes[3], half)


def _result_strides(x: torch.Tensor, sin: torch.Tensor, product: torch.Tensor
                    ) -> tuple | None:
    """The strides eager gives ``product + cat(...) * sin`` (``product`` = ``x * cos`` as
    ATen made it), or None where the rotated half would not be row-major (a channels-last
    ``x``: ``cat`` keeps its inputs' format)."""
    shape = tuple(x.shape)
    if x.dim() == 4 and x.is_contiguous(memory_format=torch.channels_last):
        return None
    rotated = dense_strides(shape, tuple(range(len(shape))))
    term = iterator_strides(shape, [(shape, rotated), (tuple(sin.shape), sin.stride())])
    return iterator_strides(shape, [(shape, product.stride()), (shape, term)])


@register_measured("static_runtime::rotary")
def _measured(node: Node, chooser: KernelChooser, default: Callable[..., Any]
              ) -> Callable[..., Any] | None:
    if node.schema != ROTARY or not ckernels.available():
        return None
    run = ckernels.library().sr_rotary_add
    per_shape = PerShape(chooser, ("aten", "native"))
    chosen = per_shape.chosen
    f32, threads, mul = torch.float32, torch.get_num_threads, torch.mul

    def ours(x, cos, sin, half) -> tuple | None:
        """``(the result, the argument block, its strides if not the product's, the
        product's)``, or None where the loop does not apply. The loop adds into the product
        ``x * cos``; where eager lays the sum out otherwise only in dimensions of 1 (the same
        addresses), the result is the product with eager's strides."""
        out = mul(x, cos)
        if out.shape != x.shape or out.dtype is not f32:
            return None
        strides = _result_strides(x, sin, out)
        if strides is None:
            return None
        if strides == out.stride():
            strides = None
        elif any(a != b and n != 1 for a, b, n in zip(strides, out.stride(), out.shape)):
            return None
        block = _block(out, x, sin.expand(x.shape), half)
        if block is None:
            return None
        run(out.data_ptr(), x.data_ptr(), sin.data_ptr(), block[1])
        result = out if strides is None else out.as_strided(out.shape, strides)
        return result, block, strides, out.stride()

    def fits(x, cos, sin, half, dim, cat_dim) -> bool:
        last = x.dim() - 1
        if dim not in (-1, last) or cat_dim not in (-1, last) or x.dtype is not f32 \
                or cos.dtype is not f32 or sin.dtype is not f32 \
                or not (x.is_cpu and cos.is_cpu and sin.is_cpu) or not 1 <= x.dim() <= 4 \
                or type(half) is not int or not 0 < half < x.shape[-1] or not x.numel() \
                or sin.dim() > x.dim() or cos.dim() > x.dim():
            return False
        for t in (cos, sin):
            for a, b in zip(reversed(t.shape), reversed(x.shape)):
                if a != b and a != 1:
                    return False
        return True

    #: the last call the loop served where it was chosen: (x's shape and strides, cos's,
    #: sin's, half, dims, the product's strides, the argument block, the result's strides
    #: where they are not the product's, the thread count) — a call of the same layouts
    #: reuses them. (A measurement's calls keep theirs apart: the loop runs on the call path
    #: only where its bucket chose it.)
    last: list = [None]

    def steady(memo, x, cos, sin, half, dim, cat_dim):
        """Our result where ``memo``'s layouts are these (its block reused), else None."""
        c = memo[0]
        if c is not None and x.shape == c[0] and half == c[6] and dim == c[7] \
                and cat_dim == c[8] and x.dtype is f32 and cos.dtype is f32 \
                and sin.dtype is f32 and x.stride() == c[1] and cos.shape == c[2] \
                and cos.stride() == c[3] and sin.shape == c[4] and sin.stride() == c[5] \
                and x.is_cpu and cos.is_cpu and sin.is_cpu and c[12] == threads():
            out = mul(x, cos)
            if out.stride() == c[9]:
                run(out.data_ptr(), x.data_ptr(), sin.data_ptr(), c[10][1])
                return out if c[11] is None else out.as_strided(out.shape, c[11])
        return None

    def served(memo, x, cos, sin, half, dim, cat_dim):
        """Our result (a call of new layouts sets up in ``memo`` what the next ones reuse),
        or None where the loop does not apply."""
        out = steady(memo, x, cos, sin, half, dim, cat_dim)
        if out is not None:
            return out
        made = ours(x, cos, sin, half)
        if made is None:
            return None
        out, block, strides, product = made
        memo[0] = (x.shape, x.stride(), cos.shape, cos.stride(), sin.shape, sin.stride(),
                   half, dim, cat_dim, product, block, strides, threads())
        return out

    def decide(key, x, cos, sin, half, dim, cat_dim) -> str:
        trial: list = [None]

        def native():
            # (timed as steady calls make it: the first sets up, its cost is the setup's)
            out = served(trial, x, cos, sin, half, dim, cat_dim)
            if out is None:
                raise RuntimeError("the loop does not apply to these strides")  # (dropped)
            return out

        return per_shape.choose(
            key, f"rotary float32 rows<={key[0][0]} d={key[0][1]}",
            lambda: {"aten": lambda: rotary_reference(x, cos, sin, half, dim, cat_dim),
                     "native": native})

    @labelled("rotary: kernel chosen per row count by measurement")
    def fn(x, cos, sin, half, dim, cat_dim):
        out = steady(last, x, cos, sin, half, dim, cat_dim)
        if out is not None:
            return out
        if fits(x, cos, sin, half, dim, cat_dim):
            d = x.shape[-1]
            key = ((size_bucket(x.numel() // d), d), threads())
            if (chosen.get(key) or decide(key, x, cos, sin, half, dim, cat_dim)) == "native":
                out = served(last, x, cos, sin, half, dim, cat_dim)
                if out is not None:
                    return out
        return default(x, cos, sin, half, dim, cat_dim)

    return per_shape.expose(fn, ("rotary",), ("rows<=", "d="))


implement_torch_ops(((ROTARY, rotary_reference),))
