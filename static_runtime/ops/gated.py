"""``static_runtime::gated_linear`` (``passes/gated.py`` makes it): a SwiGLU MLP's
``silu(linear(x, W_gate, b_gate)) * linear(x, W_up, b_up)``. Its meaning is that composite
(``gated_linear_reference``); under ``kernel_choice="measure"`` (the only option it is made
with) a choice per row count (up to the same power of two) and thread count, by measurement
(``ops/kernels.py``), between

* ``aten``: the two weights concatenated once and one ATen product into ``(rows, 2H)``, then
  ``silu`` of its first half times its second (what ``pack_linears`` makes of the two
  projections; the default);
* ``native``: our product whose epilogue makes the gated values (``ops/ckernels/gemm.c``,
  ``sr_gemm_gated``): no ``(rows, 2H)`` intermediate, no pass over it for ``silu`` and the
  product (2.2–6 × faster than ``aten`` from 1 to 128 rows at LLaMA-like sizes here),

for a contiguous float32 CPU input whose last dimension is the weights' K; anything else runs
the composite.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F

from static_runtime.ir.graph import Node
from static_runtime.ir.own_ops import GATED_LINEAR
from static_runtime.ops import ckernels
from static_runtime.ops.ckernels.layers import GatedGemm
from static_runtime.ops.kernels import KernelChooser, PerShape, size_bucket
from static_runtime.ops.native.fused import linear_shapes
from static_runtime.ops.registry import (
    SHAPE_MEANINGS,
    hands_back,
    implement_torch_ops,
    labelled,
    register_measured,
    register_native,
)
from static_runtime.ops.selection import constant_value


def gated_linear_reference(input, gate_weight, gate_bias, up_weight, up_bias):
    """What ``static_runtime::gated_linear`` means: the operators it replaced."""
    return F.silu(F.linear(input, gate_weight, gate_bias)) * F.linear(input, up_weight, up_bias)


def gated_linear_shapes(input, gate_weight, gate_bias, up_weight, up_bias):
    """``gated_linear_reference``'s result metadata, for shape programs: where the two
    weights have one shape and the input's dtype, the product's (``linear_shapes``: the two
    row-major products of one shape make a row-major one); else the reference's (under a
    shape program it decomposes: ~8 ms a node)."""
    if gate_weight.shape == up_weight.shape and gate_weight.dtype == up_weight.dtype \
            == input.dtype:
        return linear_shapes(input, gate_weight, gate_bias)
    return gated_linear_reference(input, gate_weight, gate_bias, up_weight, up_bias)


SHAPE_MEANINGS["static_runtime::gated_linear"] = gated_linear_shapes


def _constants(node: Node) -> tuple | None:
    values = tuple(constant_value(v) for v in node.inputs[1:5])
    if node.schema != GATED_LINEAR or any(v is NotImplemented for v in values):
        return None
    return values


@register_native("static_runtime::gated_linear")
def _native(node: Node):
    found = _constants(node)
    if found is None:
        return labelled("silu(linear(x, W_gate)) * linear(x, W_up) by ATen operators")(
            gated_linear_reference)
    w_gate, b_gate, w_up, b_up = found
    h = w_gate.shape[0]
    packed = torch.cat([w_gate, w_up]).detach()
    packed_bias = None
    if b_gate is not None or b_up is not None:
        packed_bias = torch.cat([torch.zeros(h, dtype=w_gate.dtype) if b is None else b.detach()
                                 for b in (b_gate, b_up)])
    linear, silu = F.linear, F.silu

    @labelled("silu(y[..., :H]) * y[..., H:] of y = linear(x, [W_gate; W_up])")
    def fn(x, wg, bg, wu, bu):
        if wg is w_gate and bg is b_gate and wu is w_up and bu is b_up:
            y = linear(x, packed, packed_bias)
            return silu(y[..., :h]) * y[..., h:]
        return gated_linear_reference(x, wg, bg, wu, bu)

    return fn


@register_measured("static_runtime::gated_linear")
def _measured(node: Node, chooser: KernelChooser, default: Callable[..., Any]
              ) -> Callable[..., Any] | None:
    found = _constants(node)
    if found is None or not ckernels.available():
        return None
    w_gate, b_gate, w_up, b_up = found
    if w_gate.dtype is not torch.float32 or w_gate.numel() == 0:
        return None
    h, k = w_gate.shape
    per_shape = PerShape(chooser, ("aten", "native"))
    kernel: list[GatedGemm | None] = [None]
    #: (x's shape, threads) → our kernel's unchecked call for its rows, or None for ATen's
    calls: dict[tuple, Any] = {}
    f32, threads, empty = torch.float32, torch.get_num_threads, torch.empty

    def ours(rows: int):
        if kernel[0] is None:
            kernel[0] = GatedGemm(w_gate, b_gate, w_up, b_up)
        return kernel[0].direct(rows)

    def decide(x, key):
        rows = x.numel() // k
        direct = ours(rows)
        shape = (*x.shape[:-1], h)
        bucket = (torch.Size((size_bucket(rows), k, h)), key[1])
        name = per_shape.chosen.get(bucket)
        if name is None:
            def native():
                out = empty(*shape)
                direct(x, out)
                return out

            name = per_shape.choose(
                bucket, f"gated_linear float32 rows<={bucket[0][0]} K={k} H={h} "
                        f"bias={b_gate is not None or b_up is not None}",
                lambda: {"aten": lambda: default(x, w_gate, b_gate, w_up, b_up),
                         "native": native})
        return ckernels.remember(calls, key, (direct, shape) if name == "native" else None)

    def accepts(x, wg, bg, wu, bu):
        return wg is w_gate and bg is b_gate and wu is w_up and bu is b_up and x.dtype is f32 \
            and x.is_cpu and x.dim() >= 1 and x.shape[-1] == k and x.is_contiguous() \
            and x.numel()

    @labelled("gated_linear: kernel chosen per row count by measurement")
    def fn(x, wg, bg, wu, bu):
        if accepts(x, wg, bg, wu, bu):
            key = (x.shape, threads())
            call = calls[key] if key in calls else decide(x, key)
            if call is not None:
                direct, shape = call
                out = empty(*shape)  # (dims spread: a tuple argument costs twice as much)
                direct(x, out)
                return out
        return default(x, wg, bg, wu, bu)

    #: the last call that wrote: (out, x's shape, threads, our call); the arena hands the
    #: same out tensor on every call of a layout
    last: list[tuple | None] = [None]

    @hands_back
    @labelled("gated_linear: kernel chosen per row count by measurement, into the arena "
              "where ours is chosen")
    def out_fn(out, x, wg, bg, wu, bu):
        c = last[0]
        if c is not None and c[0] is out and x.shape == c[1] and c[2] == threads() \
                and accepts(x, wg, bg, wu, bu):
            c[3](x, out)
            return out
        if accepts(x, wg, bg, wu, bu):
            key = (x.shape, threads())
            call = calls[key] if key in calls else decide(x, key)
            if call is not None:
                direct, shape = call
                if out.dtype is not f32 or not out.is_cpu or not out.is_contiguous() \
                        or out.shape != shape or out.data_ptr() == x.data_ptr():
                    out = empty(*shape)  # (its own result)
                else:
                    last[0] = (out, x.shape, key[1], direct)
                direct(x, out)
                return out
        return default(x, wg, bg, wu, bu)  # (its own result)

    problem, sizes = ("gated_linear", k, h), ("rows<=", "K=", "H=")
    return per_shape.expose(fn, problem, sizes), per_shape.expose(out_fn, problem, sizes)


implement_torch_ops(((GATED_LINEAR, gated_linear_reference),))
