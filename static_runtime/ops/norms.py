"""``static_runtime::rms_norm`` and ``static_runtime::l2_normalize`` (``passes/norms.py`` makes
them): their meaning as ATen operators, and under ``kernel_choice="measure"`` (the only option
they are made with) a choice per row count (up to the same power of two) and thread count,
by measurement (``ops/kernels.py``), between

* ``aten``: the composite — the five (four) operators it replaced, allocating (the default);
* ``native``: our kernel (``ops/ckernels/norms.c``): one pass for the squares, one to scale
  (divide),

for a contiguous float32 CPU input whose last dimension is the constant weight's length (for
``l2_normalize``: normalised over its last dimension); anything else runs the composite.
``aten::layer_norm`` over the last dimension with constant weight and bias gets the same
choice between ATen's kernel and ours.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from static_runtime.ir.graph import Node
from static_runtime.ir.own_ops import L2_NORMALIZE, RMS_NORM
from static_runtime.ops import ckernels
from static_runtime.ops.ckernels.layers import l2_normalize, layer_norm, rms_norm
from static_runtime.ops.enums import Kind, enum_table
from static_runtime.ops.kernels import KernelChooser, PerShape, size_bucket
from static_runtime.ops.registry import (
    SHAPE_MEANINGS,
    hands_back,
    implement_torch_ops,
    labelled,
    register_measured,
    register_native,
)
from static_runtime.ops.selection import constant_value
from static_runtime.ops.written import find_written, keep_written


def rms_norm_reference(input, weight, eps, dtype=None):
    """What ``static_runtime::rms_norm`` means: the operators it replaced, in their order
    (``dtype`` a ``torch.dtype``, or the int TorchScript spells one with)."""
    h = input * torch.rsqrt(input.pow(2).mean(-1, keepdim=True) + eps)
    return weight * (h if dtype is None else h.to(_dtype(dtype)))


def _dtype(dtype: Any) -> torch.dtype:
    """A ``torch.dtype``, whether given as one or as the int TorchScript spells it with."""
    return enum_table(Kind.DTYPE)[dtype] if isinstance(dtype, int) else dtype


def _choose(per_shape: PerShape, what: str, x: torch.Tensor, threads: int, make) -> str:
    """The kernel for ``x``'s rows up to the same power of two (``size_bucket``: traffic of
    every size brings new row counts on most calls, and a choice measured on each would put
    milliseconds on their first calls), measured on the first of them to come."""
    h = x.shape[-1]
    rows = x.numel() // h if h else 0
    bucket = (torch.Size((size_bucket(rows), h)), threads)
    name = per_shape.chosen.get(bucket)
    if name is None:
        name = per_shape.choose(bucket, f"{what} float32 rows<={bucket[0][0]} h={h} "
                                        f"contiguous", make)
    return name


def _into_arena(what: str, accepts: Callable[..., bool], calls: dict, decide: Callable,
                default: Callable[..., Any]) -> Callable[..., Any]:
    """The out variant of a measured row-wise kernel: where ours is chosen for ``x``'s shape,
    it writes the (contiguous, ``x``-shaped) arena tensor ``out`` — no allocation, ~0.6 µs of
    a call that takes 2–5 at a few rows —; elsewhere it hands back ``default``'s result
    (``registry.hands_back``). ``accepts(x, *args)``: the arguments our kernels take (the
    functional form's checks); ``calls``/``decide``: its choices (our call, or None for
    ``default``'s)."""
    f32, threads = torch.float32, torch.get_num_threads
    #: the last call that wrote: (out, x's shape, threads, our call); the arena hands the
    #: same out tensor on every call of a layout
    last: list[tuple | None] = [None]
    #: the same facts of the arena tensors written before, by ``id`` (``ops/written``)
    written: dict[int, tuple] = {}

    def out_fn(out, x, *args):
        c = last[0]
        if c is None or c[0] is not out:
            c = find_written(written, out)  # (a tensor written before: another layout's)
        if c is not None and x.shape == c[1] and c[2] == threads() and accepts(x, *args):
            c[3](x, out)
            return out
        if accepts(x, *args):
            key = (x.shape, threads())
            call = calls[key] if key in calls else decide(x, key)
            if call is not None:
                shape, into = key[0], call.into
                if out.dtype is f32 and out.is_cpu and out.is_contiguous() \
                        and out.shape == shape and out.data_ptr() != x.data_ptr():
                    last[0] = (out, shape, key[1], into)
                    keep_written(written, out, shape, key[1], into)
                    into(x, out)
                    return out
                return call(x)  # (its own result)
        return default(x, *args)  # (its own result)

    return hands_back(labelled(f"{what}: kernel chosen per input shape by measurement, into "
                               f"the arena where ours is chosen")(out_fn))


@register_native("static_runtime::rms_norm")
def _native(node: Node):
    if node.schema != RMS_NORM:
        return None
    return labelled("weight * (x * rsqrt(mean(x²) + eps)) by ATen operators")(rms_norm_reference)


@register_measured("static_runtime::rms_norm")
def _measured(node: Node, chooser: KernelChooser, default: Callable[..., Any]
              ) -> Callable[..., Any] | None:
    if node.schema != RMS_NORM or not ckernels.available():
        return None
    weight, eps, dtype = (constant_value(v) for v in node.inputs[1:4])
    if not (isinstance(weight, torch.Tensor) and weight.dtype is torch.float32
            and weight.dim() == 1 and not weight.is_meta and type(eps) is float
            and (dtype is None or _dtype(dtype) is torch.float32)):
        return None
    h = weight.shape[0]
    per_shape = PerShape(chooser, ("aten", "native"))
    native: list[Callable | None] = [None]
    #: (x's shape, threads) → our kernel's unchecked call for that shape, or None for ATen's
    calls: dict[tuple, Any] = {}
    f32, threads = torch.float32, torch.get_num_threads

    def native_for(shape):
        if native[0] is None:
            native[0] = rms_norm(weight, eps)
        return native[0].direct_for(shape)

    def decide(x, key):
        def make():
            direct = native_for(key[0])
            return {"aten": lambda: default(x, weight, eps, dtype), "native": lambda: direct(x)}

        # (our call made only where ours serves: on the request path at each new size)
        name = _choose(per_shape, "rms_norm", x, key[1], make)
        return ckernels.remember(calls, key, native_for(key[0]) if name == "native" else None)

    def accepts(x, w, eps_, dtype_):
        return w is weight and x.dtype is f32 and x.is_cpu and x.dim() >= 1 \
            and x.shape[-1] == h and x.is_contiguous()

    @labelled("rms_norm: kernel chosen per input shape by measurement")
    def fn(x, w, eps_, dtype_):
        if accepts(x, w, eps_, dtype_):
            key = (x.shape, threads())
            call = calls[key] if key in calls else decide(x, key)
            if call is not None:
                return call(x)
        return default(x, w, eps_, dtype_)

    out_fn = _into_arena("rms_norm", accepts, calls, decide, default)
    return tuple(per_shape.expose(f, ("rms_norm", h), ("rows<=", "h=")) for f in (fn, out_fn))


def l2_normalize_reference(input, dim, eps):
    """What ``static_runtime::l2_normalize`` means: ``nn.functional.normalize(input, 2, dim,
    eps)``'s operators."""
    return input / input.norm(2.0, [dim], True).clamp_min(eps).expand_as(input)


@register_native("static_runtime::l2_normalize")
def _native_l2(node: Node):
    if node.schema != L2_NORMALIZE:
        return None
    return labelled("x / clamp_min(norm(x), eps) by ATen operators")(l2_normalize_reference)


@register_measured("static_runtime::l2_normalize")
def _measured_l2(node: Node, chooser: KernelChooser, default: Callable[..., Any]
                 ) -> Callable[..., Any] | None:
    if node.schema != L2_NORMALIZE or not ckernels.available():
        return None
    dim, eps = (constant_value(v) for v in node.inputs[1:3])
    if type(dim) is not int or type(eps) is not float:
        return None
    per_shape = PerShape(chooser, ("aten", "native"))
    #: (x's shape, threads) → our kernel's unchecked call for that shape, or None for ATen's
    calls: dict[tuple, Any] = {}
    f32, threads = torch.float32, torch.get_num_threads

    def decide(x, key):
        rank = x.dim()
        if rank == 0 or x.numel() == 0 or dim not in (-1, rank - 1):
            return ckernels.remember(calls, key, None)  # (another dimension: ATen's)
        direct = l2_normalize(x.shape[-1], eps).direct_for(x.shape)
        name = _choose(per_shape, "l2_normalize", x, key[1],
                       lambda: {"aten": lambda: default(x, dim, eps),
                                "native": lambda: direct(x)})
        return ckernels.remember(calls, key, direct if name == "native" else None)

    @labelled("l2_normalize: kernel chosen per input shape by measurement")
    def fn(x, dim_, eps_):
        if accepts(x, dim_, eps_):
            key = (x.shape, threads())
            call = calls[key] if key in calls else decide(x, key)
            if call is not None:
                return call(x)
        return default(x, dim_, eps_)

    def accepts(x, dim_, eps_):
        return x.dtype is f32 and x.is_cpu and x.is_contiguous() and dim_ == dim \
            and eps_ == eps

    out_fn = _into_arena("l2_normalize", accepts, calls, decide, default)
    return tuple(per_shape.expose(f, ("l2_normalize", dim), ("rows<=", "h="))
                 for f in (fn, out_fn))


_LAYER_NORM = str(torch.ops.aten.layer_norm.default._schema)


def _layer_norm_shapes(input, normalized_shape, weight=None, bias=None, eps=1e-5,
                       cudnn_enable=True):
    """``layer_norm``'s result metadata: its kernels write a contiguous tensor of the input's
    shape and dtype (under a shape program, PyTorch's own decomposes it: ~8 ms a node)."""
    return torch.empty_like(input, memory_format=torch.contiguous_format)


SHAPE_MEANINGS["aten::layer_norm"] = _layer_norm_shapes


def _rms_norm_shapes(input, weight, eps, dtype=None):
    """``rms_norm_reference``'s result metadata, for shape programs: where the input is a
    row-major float tensor, the weight a vector of its last dimension and both of one dtype
    (a cast to that dtype, if any), a row-major tensor of the input's shape and dtype
    (row-major operands, the weight broadcast: a row-major product); else the reference's
    (under a shape program it decomposes: ~6 ms a node)."""
    if (dtype is None or _dtype(dtype) == input.dtype) and input.is_floating_point() \
            and weight.dtype == input.dtype \
            and weight.dim() == 1 and input.dim() >= 1 \
            and weight.shape[0] == input.shape[-1] and input.is_contiguous():
        return input.new_empty(input.shape)
    return rms_norm_reference(input, weight, eps, dtype)


SHAPE_MEANINGS["static_runtime::rms_norm"] = _rms_norm_shapes


def _layer_norm_constants(node: Node) -> tuple | None:
    """``(h, weight, bias, eps)`` of a ``layer_norm`` over the last dimension with constant
    float32 (or no) weight and bias, else None."""
    if node.schema != _LAYER_NORM or len(node.inputs) != 6:
        return None
    shape, weight, bias, eps = (constant_value(v) for v in node.inputs[1:5])
    if not (isinstance(shape, (list, tuple)) and len(shape) == 1 and type(shape[0]) is int
            and shape[0] > 0 and type(eps) is float):
        return None
    h = shape[0]
    for t in (weight, bias):
        if t is not None and not (isinstance(t, torch.Tensor) and t.dtype is torch.float32
                                  and t.shape == (h,) and not t.is_meta):
            return None
    return h, weight, bias, eps


@register_native("aten::layer_norm")
def _native_layer_norm(node: Node):
    """``layer_norm`` as the fallback would call it, where ours may be measured against it
    (only out variants and natives are measured)."""
    if _layer_norm_constants(node) is None:
        return None
    return labelled("torch.layer_norm")(torch.layer_norm)


@register_measured("aten::layer_norm")
def _measured_layer_norm(node: Node, chooser: KernelChooser, default: Callable[..., Any]
                         ) -> Callable[..., Any] | None:
    """``layer_norm`` over the last dimension: per row count (up to the same power of two),
    ATen's kernel or ours (``norms.c``: the mean, the deviations' squares, then scale and
    shift; ATen pays ~0.2 µs a row at 64 features, 14 µs for 400 rows)."""
    found = _layer_norm_constants(node)
    if found is None or not ckernels.available():
        return None
    h, weight, bias, eps = found
    per_shape = PerShape(chooser, ("aten", "native"))
    native: list[Callable | None] = [None]
    #: (x's shape, threads) → our kernel's unchecked call for that shape, or None for ATen's
    calls: dict[tuple, Any] = {}
    f32, threads, shape_arg = torch.float32, torch.get_num_threads, [h]

    def native_for(shape):
        if native[0] is None:
            native[0] = layer_norm(h, weight, bias, eps)
        return native[0](shape)

    def decide(x, key):
        def make():
            direct = native_for(key[0])
            return {"aten": lambda: default(x, shape_arg, weight, bias, eps, True),
                    "native": lambda: direct(x)}

        # (our call made only where ours serves: on the request path at each new size)
        name = _choose(per_shape, "layer_norm", x, key[1], make)
        return ckernels.remember(calls, key, native_for(key[0]) if name == "native" else None)

    def accepts(x, shape_, w, b, eps_, *rest):
        return w is weight and b is bias and eps_ == eps and x.dtype is f32 and x.is_cpu \
            and x.dim() >= 1 and x.shape[-1] == h and x.is_contiguous() \
            and len(shape_) == 1 and shape_[0] == h  # (no list made a call)

    @labelled("layer_norm: kernel chosen per input shape by measurement")
    def fn(x, shape_, w, b, eps_, *rest):
        if accepts(x, shape_, w, b, eps_):
            key = (x.shape, threads())
            call = calls[key] if key in calls else decide(x, key)
            if call is not None:
                return call(x)
        return default(x, shape_, w, b, eps_, *rest)

    out_fn = _into_arena("layer_norm", accepts, calls, decide, default)
    return tuple(per_shape.expose(f, ("layer_norm", h), ("rows<=", "h="))
                 for f in (fn, out_fn))


implement_torch_ops(((RMS_NORM, rms_norm_reference), (L2_NORMALIZE, l2_normalize_reference)))
