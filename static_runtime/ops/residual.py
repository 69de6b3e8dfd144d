"""``static_runtime::linear_residual`` (``passes/residual.py`` makes it): ``act(linear(x, W, b)
+ r)``. Its meaning is that composite (``linear_residual_reference``); under
``kernel_choice="measure"`` (the only option it is made with) a choice per row count (up to
the same power of two) and thread count, by measurement (``ops/kernels.py``), between

* ``aten``: the operators it replaced — ``linear``, the add, the activation (the default);
* ``native``: our product adding the residual in its epilogue, bias and activation there too
  (``ops/ckernels/gemm.c``, ``sr_gemm_res_block``): one call, no pass over the sum for the add
  and the activation (a residual that broadcasts is first copied into the result, spread to
  every row, and added from there),

for a contiguous float32 CPU input whose last dimension is the weight's K and a float32 CPU
residual that broadcasts to the product's shape without widening it; anything else runs the
composite.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F

from static_runtime.ir.graph import Node
from static_runtime.ir.own_ops import LINEAR_RESIDUAL
from static_runtime.ops import ckernels
from static_runtime.ops.kernels import KernelChooser, PerShape, size_bucket
from static_runtime.ops.native.fused import LINEAR_POSTOPS, linear_shapes
from static_runtime.ops.registry import (
    SHAPE_MEANINGS,
    implement_torch_ops,
    labelled,
    register_measured,
    register_native,
    register_out_variant,
)
from static_runtime.ops.selection import constant_value
from static_runtime.ops.strides import broadcasts_into
from static_runtime.ops.written import find_written, keep_written


def linear_residual_reference(input, weight, bias, residual, attr: str):
    """What ``static_runtime::linear_residual`` means: the operators it replaced."""
    y = F.linear(input, weight, bias) + residual
    act = LINEAR_POSTOPS[attr][0]
    return y if act is None else act(y)


def linear_residual_shapes(input, weight, bias, residual, attr: str):
    """``linear_residual_reference``'s result metadata, for shape programs: where the
    residual is a row-major tensor of the product's shape and dtype, the product's
    (``linear_shapes``: row-major operands make a row-major sum); else the product added to
    the residual as ``add``'s meta function lays it out. The activation keeps the sum's.
    (The reference decomposed ``linear`` and the add over symbolic sizes: ~100 ms of a
    2-layer BERT's program.)"""
    LINEAR_POSTOPS[attr]  # (an unknown one raises, as the reference does)
    product = linear_shapes(input, weight, bias)
    if residual.shape == product.shape and residual.dtype == product.dtype \
            and residual.is_contiguous():
        return product
    return torch.add(product, residual)


SHAPE_MEANINGS["static_runtime::linear_residual"] = linear_residual_shapes


def _constants(node: Node) -> tuple | None:
    values = tuple(constant_value(v) for v in (*node.inputs[1:3], node.inputs[4]))
    if node.schema != LINEAR_RESIDUAL or any(v is NotImplemented for v in values) \
            or values[2] not in LINEAR_POSTOPS:
        return None
    return values


@register_native("static_runtime::linear_residual")
def _native(node: Node):
    return labelled("act(linear(x, W, b) + residual) by ATen operators")(
        linear_residual_reference)


@register_out_variant("static_runtime::linear_residual")
def _out_variant(node: Node):
    """``linear`` allocating, the sum written into the planned tensor, the activation in
    place there."""
    linear, add = F.linear, torch.add

    def out_fn(out, x, weight, bias, residual, attr):
        add(linear(x, weight, bias), residual, out=out)
        act_ = LINEAR_POSTOPS[attr][1]
        if act_ is not None:
            act_(out)
        return out

    fn = labelled("act(linear(x, W, b) + residual) by ATen operators")(
        linear_residual_reference)
    return fn, labelled("act(linear(x, W, b) + residual) by ATen operators, out=")(out_fn)


@register_measured("static_runtime::linear_residual")
def _measured(node: Node, chooser: KernelChooser, default: Any) -> Any:
    """``(fn, out_fn)`` where ``default`` is the out variant's pair, else ``fn``."""
    found = _constants(node)
    if found is None or not ckernels.available():
        return None
    weight, bias, attr = found
    if not (isinstance(weight, torch.Tensor) and weight.dtype is torch.float32
            and weight.dim() == 2 and weight.numel() and not weight.is_meta
            and (bias is None or (isinstance(bias, torch.Tensor)
                                  and bias.dtype is torch.float32))):
        return None
    n, k = weight.shape
    paired = isinstance(default, tuple)
    default_fn, default_out = default if paired else (default, None)
    per_shape = PerShape(chooser, ("aten", "native"))
    gemm: list[ckernels.Gemm | None] = [None]
    #: (x's shape, the residual's shape, threads) → our call for them, or None for ATen's
    calls: dict[tuple, Any] = {}
    f32, threads, empty = torch.float32, torch.get_num_threads, torch.empty

    def ours(rows: int, shape: tuple[int, ...], exact: bool) -> tuple:
        """What our calls for ``rows`` rows need: ``(run, the result's shape, exact)``;
        ``exact``: the residual has the result's shape (else it broadcasts)."""
        if gemm[0] is None:
            gemm[0] = ckernels.Gemm(weight.t(), bias, attr)
        return gemm[0].with_residual(rows), shape, exact

    def decide(x, residual, key):
        # (on the request path at each new size: the shapes read from the key, our call made
        # only where ours serves)
        xs, rs = key[0], key[1]
        shape = (*xs[:-1], n)
        exact = rs == shape
        if not exact and not broadcasts_into(rs, shape):
            return ckernels.remember(calls, key, None)
        rows = x.numel() // k
        bucket = (torch.Size((size_bucket(rows), k, n)), key[-1])
        name = per_shape.chosen.get(bucket)
        found = ours(rows, shape, exact) if name in (None, "native") else None
        if name is None:
            # (timed allocating: one choice serves both forms, as a GEMM's does)
            name = per_shape.choose(
                bucket, f"linear_residual+{attr} float32 rows<={bucket[0][0]} K={k} N={n} "
                        f"bias={bias is not None}",
                lambda: {"aten": lambda: default_fn(x, weight, bias, residual, attr),
                         "native": lambda: write(empty(*shape), x, residual, found)})
        return ckernels.remember(calls, key, found if name == "native" else None)

    def write(out, x, residual, found):
        """Our product into ``out``, the residual added in its epilogue."""
        run, _, exact = found
        if exact and residual.is_contiguous():
            run(x, out, residual)  # (read where it is)
        else:
            out.copy_(residual)  # (spread to every row)
            run(x, out, out)
        return out

    #: the last call's (x's shape, the residual's shape, threads, our calls): a loop or a
    #: layer repeated calls the node with the same shapes
    last: list[tuple | None] = [None]

    def ours_for(x, residual):
        """Our calls for these arguments, or None where the composite answers."""
        if x.dtype is f32 and residual.dtype is f32 and x.is_cpu and residual.is_cpu \
                and x.dim() >= 1 and x.shape[-1] == k and x.is_contiguous() and x.numel():
            c = last[0]
            if c is not None and x.shape == c[0] and residual.shape == c[1] \
                    and threads() == c[2]:
                return c[3]
            key = (x.shape, residual.shape, threads())
            found = calls[key] if key in calls else decide(x, residual, key)
            last[0] = (*key, found)
            return found
        return None

    @labelled(f"linear_residual ({attr}): kernel chosen per row count by measurement")
    def fn(x, w, b, residual, attr_):
        if w is weight and b is bias:
            found = ours_for(x, residual)
            if found is not None:
                run, shape, exact = found
                out = empty(*shape)
                if exact and residual.is_contiguous():
                    run(x, out, residual)
                    return out
                return write(out, x, residual, found)
        return default_fn(x, w, b, residual, attr_)

    #: the last out= call read where it is: (out, x's shape, the residual's shape, threads,
    #: our call), so that the next one with the same tensors' shapes (the arena hands the
    #: same out tensor on every call of a layout) checks a few facts and makes one call
    last_out: list[tuple | None] = [None]
    #: the same facts of the arena tensors written before, by ``id`` (``ops/written``)
    written: dict[int, tuple] = {}

    @labelled(f"linear_residual ({attr}): kernel chosen per row count by measurement, out=")
    def out_fn(out, x, w, b, residual, attr_):
        c = last_out[0]
        if c is None or c[0] is not out:
            c = find_written(written, out)  # (a tensor written before: another layout's)
            if c is None:
                return out_slow(out, x, w, b, residual, attr_)
        if w is weight and b is bias and x.dtype is f32 \
                and residual.dtype is f32 and x.is_cpu and residual.is_cpu \
                and x.shape == c[1] and residual.shape == c[2] and c[3] == threads() \
                and x.is_contiguous() and residual.is_contiguous():
            c[4](x, out, residual)
            return out
        return out_slow(out, x, w, b, residual, attr_)

    def out_slow(out, x, w, b, residual, attr_):
        if w is weight and b is bias and out.dtype is f32 and out.is_cpu \
                and out.is_contiguous() and out.shape == (*x.shape[:-1], n):
            found = ours_for(x, residual)
            if found is not None:
                if found[2] and residual.is_contiguous():
                    facts = last_out[0] = (out, x.shape, residual.shape, threads(), found[0])
                    keep_written(written, out, *facts[1:])
                return write(out, x, residual, found)
        return default_out(out, x, w, b, residual, attr_)

    problem = ("linear_residual", k, n, attr)
    sizes = ("rows<=", "K=", "N=")
    per_shape.expose(fn, problem, sizes)
    if not paired:
        return fn
    return fn, per_shape.expose(out_fn, problem, sizes)


implement_torch_ops(((LINEAR_RESIDUAL, linear_residual_reference),))
