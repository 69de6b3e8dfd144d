"""Fused operators that graph passes introduce (``passes/fusion.py``), and how they run.

``static_runtime::attention(query, key_t, value, scale, divide, dim)`` is
``matmul(softmax(matmul(query, key_t) * scale, dim), value)`` (``/ scale`` when ``divide``;
no scaling when ``scale`` is None). It runs PyTorch's fused ``scaled_dot_product_attention``
where it computes the same and was measured faster — 4-D float tensors of matching batch
and head sizes, softmax over the last dimension, a key whose rows are contiguous (``key_t``
a transposed view, as models make it: ``key_t.stride(-2) == 1``; the fused kernel copies any
other key, and then loses), and the layout and sizes ``_sdpa_faster`` names
(``benchmarks/attention_forms.py``) — and the written-out operators otherwise, which are
exactly the ones it replaced (same values, same errors).

``static_runtime::masked_attention(query, key_t, value, scale, divide, dim, mask,
mask_kind)`` is the same with the scaled scores masked before the softmax: ``scores + mask``
(``mask_kind`` ``"add"``), ``scores.masked_fill(mask, -inf)`` (``"fill"``) or
``where(mask, scores, -inf)`` (``"keep"``). The fused kernel serves under the conditions
above (for masks, ``_sdpa_faster`` asks for more slices), for a mask it takes as it is: a
float mask of the query's dtype, a boolean one for ``"fill"``/``"keep"``, broadcastable to
the scores without changing their shape — and only when no query row is masked entirely:
the written-out form gives NaN there, the fused kernel zeros (checked on each call by one
reduction over the mask).

``static_runtime::conv2d_pointwise(input, weight, bias, stride, padding, dilation, groups,
attr)`` is ``conv2d`` followed by the activation ``attr`` names: ``"none"``, ``"relu"``,
``"relu6"`` (``hardtanh`` to [0, 6]), ``"hardswish"`` or ``"silu"``. With a constant
float32 weight it runs oneDNN's ``_convolution_pointwise`` on a weight reordered once into
oneDNN's blocked layout, the activation fused into the convolution. Its output is
channels-last; ``passes/fusion.py`` only rewrites convolutions whose outputs reach nothing
but layout-insensitive consumers, so that never shows.

``static_runtime::linear_pointwise(input, weight, bias, attr)`` is ``linear`` followed by
the activation ``attr`` names (``LINEAR_POSTOPS``: ``"none"``, ``"relu"``, ``"gelu"``,
``"gelu_tanh"``, ``"tanh"``, ``"sigmoid"``, ``"hardswish"``, ``"relu6"``, ``"silu"``). With a
constant float32 weight, a product of at least ``ONEDNN_LINEAR_MIN_ROWS`` rows runs oneDNN's
``_linear_pointwise`` on a weight reordered once (on first use), the activation fused; fewer
rows run ``addmm`` and the activation in place, as the unfused nodes did (oneDNN's linear
costs ~20 µs more per call, which only a large product hides; ``benchmarks/onednn_postops.py
--sweep``). Its output is a contiguous tensor either way, like ``linear``'s. Under
``StaticModuleOptions(kernel_choice="measure")`` that fixed threshold is replaced by a choice
measured per row count on the machine (``ops/gemm.py``).

Their schemas are declared in ``ir/own_ops.py``, as PyTorch operators too
(``torch.ops.static_runtime.attention``...); this module gives those four operators the unfused
composition as their implementation, so the fallback tier could run them.
"""

from __future__ import annotations

import sys

import torch

from static_runtime.ir.graph import Node
from static_runtime.ir.own_ops import (
    ATTENTION,
    CONV2D_POINTWISE,
    LINEAR_POINTWISE,
    MASKED_ATTENTION,
)
from static_runtime.ops.registry import (
    SHAPE_MEANINGS,
    implement_torch_ops,
    labelled,
    register_native,
    register_out_variant,
)
from static_runtime.passes.fusion import LINEAR_MIN_WEIGHT

#: Batch × head slices from which masked attention may run the fused kernel, and up to which
#: unmasked attention on contiguous tensors does (``_sdpa_faster``).
SDPA_SLICES = 8
#: Query length up to which unmasked attention on contiguous tensors runs the fused kernel,
#: and from which masked attention with a boolean mask does.
SDPA_SHORT_QUERY = 8
SDPA_LONG_QUERY = 32

#: ``masked_attention``'s ``mask_kind`` → how the mask applies to the scaled scores.
MASK_KINDS = {
    "add": lambda scores, mask: scores + mask,
    "fill": lambda scores, mask: scores.masked_fill(mask, float("-inf")),
    "keep": lambda scores, mask: torch.where(mask, scores, float("-inf")),
}

_FLOATS = (torch.float32, torch.float64)


def attention_reference(query, key_t, value, scale, divide: bool, dim: int):
    """The operators the fusion replaced, in their order."""
    scores = torch.matmul(query, key_t)
    if scale is not None:
        scores = torch.div(scores, scale) if divide else torch.mul(scores, scale)
    return torch.matmul(torch.softmax(scores, dim), value)


def masked_attention_reference(query, key_t, value, scale, divide: bool, dim: int, mask,
                               mask_kind: str):
    """The operators the fusion replaced, in their order."""
    apply = _mask_kind(mask_kind)
    scores = torch.matmul(query, key_t)
    if scale is not None:
        scores = torch.div(scores, scale) if divide else torch.mul(scores, scale)
    return torch.matmul(torch.softmax(apply(scores, mask), dim), value)


def _mask_kind(mask_kind: str):
    if mask_kind not in MASK_KINDS:
        raise ValueError(f"static_runtime::masked_attention: mask_kind must be one of "
                         f"{sorted(MASK_KINDS)}, got {mask_kind!r}")
    return MASK_KINDS[mask_kind]


def _sdpa_fits(query, key_t, value, dim) -> bool:
    """Whether ``scaled_dot_product_attention`` computes this attention on a key it need not
    copy: 4-D float tensors of one dtype, matching sizes, a softmax over the last dimension
    and contiguous key rows (``key_t.stride(-2) == 1``)."""
    qs, ks, vs = query.shape, key_t.shape, value.shape
    return (len(qs) == 4 and len(ks) == 4 and len(vs) == 4 and dim in (-1, 3)
            and qs[:2] == ks[:2] == vs[:2] and qs[3] == ks[2] and ks[3] == vs[2]
            and key_t.stride(2) == 1 and query.dtype in _FLOATS
            and key_t.dtype is query.dtype and value.dtype is query.dtype)


def _sdpa_faster(query, mask_kind: str | None) -> bool:
    """Whether the fused kernel was measured faster than the written-out form
    (``benchmarks/attention_forms.py``, both layouts). On views of ``(batch, L,
    heads, d)`` projections (heads inside a row: ``query.stride(1) < query.stride(2)``) the
    written-out products pay for the layout and the fused kernel does not: it wins unmasked
    everywhere (0.6–0.95 ×), masked from ``SDPA_SLICES`` slices (0.75–0.95 ×; below, the
    mask check's few µs even it out). On contiguous ``(batch, heads, L, d)`` tensors unmasked
    it wins for short queries or few slices (0.6–0.95 ×) and loses up to 1.3 × beyond; with
    an added mask it never wins (1.0–1.3 ×); with a boolean mask from ``SDPA_SLICES`` slices
    and ``SDPA_LONG_QUERY`` on (0.7–0.95 ×: ``masked_fill`` written out is slow)."""
    slices, length = query.shape[0] * query.shape[1], query.shape[2]
    if query.stride(1) < query.stride(2):
        return mask_kind is None or slices >= SDPA_SLICES
    if mask_kind is None:
        return length <= SDPA_SHORT_QUERY or slices <= SDPA_SLICES
    return mask_kind != "add" and slices >= SDPA_SLICES and length >= SDPA_LONG_QUERY


def _scaled_scores(query, key_t, scale, divide: bool):
    """``matmul(query, key_t)`` scaled as written — in place where the product is a float
    tensor, which it owns (one allocation fewer than the operators it replaced; the values
    are theirs)."""
    scores = torch.matmul(query, key_t)
    if scale is None:
        return scores
    if scores.is_floating_point():
        return scores.div_(scale) if divide else scores.mul_(scale)
    return torch.div(scores, scale) if divide else torch.mul(scores, scale)


def _fits(mask, shape) -> bool:
    """Whether ``mask`` broadcasts to ``shape`` without changing it."""
    ms = mask.shape
    return len(ms) <= len(shape) and all(
        m == 1 or m == s for m, s in zip(reversed(ms), reversed(shape)))


def _sdpa_mask(query, key_t, mask, mask_kind: str):
    """The mask as ``scaled_dot_product_attention`` takes it, or None where the fused kernel
    would not compute the same: another dtype, a broadcast that changes the scores' shape, or
    a query row masked entirely."""
    if not _fits(mask, (*query.shape[:3], key_t.shape[3])):
        return None
    # a run on meta or fake tensors (planning, shape programs) has no data to look at: it
    # takes the fused kernel's shapes and strides, as most real calls will
    real = type(mask) is torch.Tensor and not mask.is_meta
    if mask_kind == "add":
        # (a row's largest entry: one pass and a small result; isneginf(mask).all(-1) took
        # 6 x longer on an (8, 1, 128, 128) mask, 78 µs, which ate the fused kernel's gain)
        if mask.dtype is not query.dtype \
                or real and bool(torch.isneginf(torch.amax(mask, -1)).any()):
            return None
        return mask
    if mask.dtype is not torch.bool:
        return None
    keep = torch.logical_not(mask) if mask_kind == "fill" else mask
    return keep if not real or bool(keep.any(-1).all()) else None


_nn = torch._C._nn

#: ``linear_pointwise``'s and ``conv2d_pointwise``'s ``attr`` → (the activation, its
#: in-place form, oneDNN's post-op attr, its scalars and algorithm).
LINEAR_POSTOPS = CONV_POSTOPS = {
    "none": (None, None, "none", [], ""),
    "relu": (torch.relu, torch.relu_, "relu", [], ""),
    "relu6": (lambda t: _nn.hardtanh(t, 0.0, 6.0), lambda t: _nn.hardtanh_(t, 0.0, 6.0),
              "hardtanh", [0.0, 6.0], ""),
    "hardswish": (_nn.hardswish, _nn.hardswish_, "hardswish", [], ""),
    "silu": (_nn.silu, _nn.silu_, "swish", [], ""),
    "gelu": (_nn.gelu, _nn.gelu_, "gelu", [], "none"),
    "gelu_tanh": (lambda t: _nn.gelu(t, approximate="tanh"),
                  lambda t: _nn.gelu_(t, approximate="tanh"), "gelu", [], "tanh"),
    "tanh": (torch.tanh, torch.tanh_, "tanh", [], ""),
    "sigmoid": (torch.sigmoid, torch.sigmoid_, "sigmoid", [], ""),
}

#: A product of at least this many rows runs on oneDNN (``benchmarks/onednn_postops.py
#: --sweep``: from 8 rows on, with weights of 512 × 512 or more, 0.4–0.9 × the time of
#: ``addmm`` + activation; at 1 row 0.7–1.3 ×).
ONEDNN_LINEAR_MIN_ROWS = 8


def _linear_postop(attr: str) -> tuple:
    """``LINEAR_POSTOPS[attr]``; an ``attr`` it lacks raises as the operator does."""
    if attr not in LINEAR_POSTOPS:
        raise ValueError(f"static_runtime::linear_pointwise: attr must be one of "
                         f"{sorted(LINEAR_POSTOPS)}, got {attr!r}")
    return LINEAR_POSTOPS[attr]


def linear_pointwise_reference(input, weight, bias, attr):
    act = _linear_postop(attr)[0]
    out = torch._C._nn.linear(input, weight, bias)
    return out if act is None else act(out)


def _activation(attr: str):
    if attr not in CONV_POSTOPS:
        raise ValueError(f"static_runtime::conv2d_pointwise: attr must be one of "
                         f"{sorted(CONV_POSTOPS)}, got {attr!r}")
    return CONV_POSTOPS[attr][0]


def conv2d_pointwise_reference(input, weight, bias, stride, padding, dilation, groups, attr):
    """What the operator means: ``conv2d`` then the activation, in the channels-last memory
    every kernel of it writes (oneDNN's, and those ``ops/conv.py`` measures), so a run on
    fake tensors (a shape program) sees the strides the real kernels give."""
    act = _activation(attr)
    out = torch.conv2d(input, weight, bias, stride, padding, dilation, groups)
    if out.dim() == 4:
        out = out.contiguous(memory_format=torch.channels_last)
    return out if act is None else act(out)


@register_native("static_runtime::attention")
def _attention(node: Node):
    if node.schema != ATTENTION:
        return None
    sdpa = torch._C._nn.scaled_dot_product_attention
    matmul, softmax = torch.matmul, torch.softmax

    @labelled("scaled_dot_product_attention, or matmul-softmax-matmul (by layout)")
    def attention(query, key_t, value, scale, divide, dim):
        if query.dim() == 4 and _sdpa_faster(query, None) and _sdpa_fits(query, key_t, value, dim):
            factor = 1.0 if scale is None else (1.0 / scale if divide else float(scale))
            return sdpa(query, key_t.transpose(-2, -1), value, scale=factor)
        scores = _scaled_scores(query, key_t, scale, divide)
        return matmul(softmax(scores, dim), value)

    return attention


@register_native("static_runtime::masked_attention")
def _masked_attention(node: Node):
    if node.schema != MASKED_ATTENTION:
        return None
    sdpa = torch._C._nn.scaled_dot_product_attention
    matmul, softmax = torch.matmul, torch.softmax
    min_slices = SDPA_SLICES

    @labelled("scaled_dot_product_attention, or matmul-mask-softmax-matmul (by layout, size "
              "and mask)")
    def masked_attention(query, key_t, value, scale, divide, dim, mask, mask_kind):
        apply = _mask_kind(mask_kind)
        qs = query.shape  # (the cheapest refusal first: the written-out form is the common one)
        if len(qs) == 4 and qs[0] * qs[1] >= min_slices and _sdpa_faster(query, mask_kind) \
                and _sdpa_fits(query, key_t, value, dim):
            attn_mask = _sdpa_mask(query, key_t, mask, mask_kind)
            if attn_mask is not None:
                factor = 1.0 if scale is None else (1.0 / scale if divide else float(scale))
                return sdpa(query, key_t.transpose(-2, -1), value, attn_mask=attn_mask,
                            scale=factor)
        scores = _scaled_scores(query, key_t, scale, divide)
        return matmul(softmax(apply(scores, mask), dim), value)

    return masked_attention


@register_native("static_runtime::conv2d_pointwise")
def _conv2d_pointwise(node: Node):
    if node.schema != CONV2D_POINTWISE:
        return None
    from static_runtime.ops.selection import constant_value

    weight = constant_value(node.inputs[1])
    bias = constant_value(node.inputs[2])
    args = [constant_value(v) for v in node.inputs[3:]]
    conv2d = torch.conv2d
    if (not isinstance(weight, torch.Tensor) or weight.dtype is not torch.float32
            or weight.dim() != 4 or not torch.backends.mkldnn.is_available()
            or not (bias is None or isinstance(bias, torch.Tensor))
            or any(a is NotImplemented for a in args)):
        @labelled("torch.conv2d (+ activation)")
        def unfused(x, w, b, stride, padding, dilation, groups, attr):
            act = _activation(attr)
            out = conv2d(x, w, b, stride, padding, dilation, groups)
            return out if act is None else act(out)

        return unfused
    stride, padding, dilation, groups, attr = args
    act = _activation(attr)
    packed = torch.ops.mkldnn._reorder_convolution_weight(
        weight, padding, stride, dilation, groups)
    pointwise = torch.ops.mkldnn._convolution_pointwise.default
    channels_last = torch.channels_last
    _, _, unary, scalars, algorithm = CONV_POSTOPS[attr]
    if _is_pointwise_1x1(weight, stride, padding, groups):
        def on_onednn(x):
            return pointwise(x, packed, bias, padding, stride, dilation, groups, unary,
                             scalars, algorithm)

        return _conv1x1_as_matmul(weight, bias, attr, on_onednn)

    # The fused path needs the constants it was prepared for (an identity check): a planning
    # run on meta tensors passes meta copies, which take the unfused path.
    @labelled(f"oneDNN _convolution_pointwise ({attr}, prepacked weight)")
    def fused(x, w, b, stride_, padding_, dilation_, groups_, attr_):
        if w is weight and b is bias and x.dtype is torch.float32 and x.dim() == 4 \
                and not x.is_mkldnn and x.device.type == "cpu":
            return pointwise(x, packed, bias, padding, stride, dilation, groups, unary,
                             scalars, algorithm)
        out = conv2d(x, w, b, stride_, padding_, dilation_, groups_)
        out = out if act is None else act(out)
        if out.is_meta and out.dim() == 4:
            # planning ahead on meta tensors: lay it out as the oneDNN kernel will
            out = out.contiguous(memory_format=channels_last)
        return out

    return fused


def _is_pointwise_1x1(weight: torch.Tensor, stride, padding, groups) -> bool:
    return (tuple(weight.shape[2:]) == (1, 1) and groups == 1
            and list(stride) in ([1], [1, 1]) and list(padding) in ([0], [0, 0]))


#: A 1 × 1 convolution of fewer multiply-adds than this runs as a matmul (below).
CONV1X1_MATMUL_MAX_MACS = 1 << 24


def _conv1x1_as_matmul(weight: torch.Tensor, bias: torch.Tensor | None, attr: str, on_onednn):
    """A 1 × 1, stride-1, ungrouped convolution is a product of the (pixels, in channels)
    matrix a channels-last input is in memory with the (in, out) weight; written into a
    contiguous (pixels, out channels) matrix, its result is the channels-last tensor the
    oneDNN kernel would write, computed 3 × faster at MobileNet's sizes (oneDNN's fixed cost
    per call is ~20 µs; ``benchmarks/onednn_postops.py``, column ``mm+act``). Products of
    ``CONV1X1_MATMUL_MAX_MACS`` or more stay on oneDNN (``on_onednn``), where the fixed cost
    is lost in the work and the two were level within our measuring noise."""
    cout, cin = weight.shape[:2]
    max_macs = CONV1X1_MATMUL_MAX_MACS
    weight_t = weight.reshape(cout, cin).t()
    act, act_ = CONV_POSTOPS[attr][:2]
    conv2d, addmm, mm, channels_last = torch.conv2d, torch.addmm, torch.mm, torch.channels_last

    @labelled(f"1 x 1 convolution ({attr}): addmm on the channels-last input below "
              f"{max_macs} multiply-adds, else oneDNN")
    def conv1x1(x, w, b, stride_, padding_, dilation_, groups_, attr_):
        if w is weight and b is bias and x.dim() == 4 and x.shape[1] == cin \
                and x.dtype is torch.float32 and x.device.type == "cpu" and not x.is_mkldnn:
            if x.numel() * cout >= max_macs:
                return on_onednn(x)
            n, _, h, wd = x.shape
            pixels = x.permute(0, 2, 3, 1).reshape(n * h * wd, cin)  # a view if channels-last
            out = mm(pixels, weight_t) if bias is None else addmm(bias, pixels, weight_t)
            out = out.view(n, h, wd, cout).permute(0, 3, 1, 2)
            return out if act_ is None else act_(out)
        out = conv2d(x, w, b, stride_, padding_, dilation_, groups_)
        out = out if act is None else act(out)
        if out.is_meta and out.dim() == 4:
            out = out.contiguous(memory_format=channels_last)
        return out

    return conv1x1


@register_out_variant("static_runtime::linear_pointwise")
def _linear_pointwise(node: Node):
    if node.schema != LINEAR_POINTWISE:
        return None
    from static_runtime.ops.selection import constant_value

    weight = constant_value(node.inputs[1])
    bias = constant_value(node.inputs[2])
    attr = constant_value(node.inputs[3])
    act, act_, unary, scalars, algorithm = _linear_postop(attr)
    linear = torch._C._nn.linear
    if not (isinstance(weight, torch.Tensor) and weight.dtype is torch.float32
            and weight.dim() == 2 and weight.layout == torch.strided and weight.numel() > 0
            and (bias is None or (isinstance(bias, torch.Tensor) and bias.dim() == 1
                                  and bias.dtype is torch.float32
                                  and bias.layout == torch.strided))
            and torch.backends.mkldnn.is_available()):
        @labelled("torch linear (+ activation)")
        def plain(x, w, b, attr_):
            out = linear(x, w, b)
            return out if act is None else act(out)

        @labelled("torch linear(out=) (+ activation in place)")
        def plain_out(out, x, w, b, attr_):
            linear(x, w, b, out=out)
            return out if act_ is None else act_(out)

        return plain, plain_out

    n, k = weight.shape
    weight_t = weight.t()
    addmm, mm = torch.addmm, torch.mm
    pointwise = torch.ops.mkldnn._linear_pointwise.default
    reorder = torch.ops.mkldnn._reorder_linear_weight
    # oneDNN's fixed cost pays back from 8 rows only on large weights; a smaller one is here
    # because fuse_linear_activation took its activation along (for the measured kernels;
    # this runs when they do not: another dtype, a strided input, a spent budget)
    min_rows = ONEDNN_LINEAR_MIN_ROWS if weight.numel() >= LINEAR_MIN_WEIGHT else sys.maxsize
    #: the weight in oneDNN's layout, made on the first product large enough to use it
    #: (two threads racing both make it; either copy is right)
    packed: list[torch.Tensor | None] = [None]

    def product(x2, o2):
        """``act(x2 · Wᵀ + b)`` for a (rows, k) float32 matrix, into ``o2`` if given."""
        if x2.shape[0] >= min_rows:
            w = packed[0]
            if w is None:
                w = packed[0] = reorder(weight)
            y = pointwise(x2, w, bias, unary, scalars, algorithm)
            return y if o2 is None else o2.copy_(y)
        if o2 is None:
            y = mm(x2, weight_t) if bias is None else addmm(bias, x2, weight_t)
        else:
            y = mm(x2, weight_t, out=o2) if bias is None else addmm(bias, x2, weight_t, out=o2)
        return y if act_ is None else act_(y)

    # The fast path needs the constants it was prepared for (an identity check): a planning
    # run on meta tensors passes meta copies, which take the general path.
    label = f"oneDNN _linear_pointwise ({attr}) from {min_rows} rows, else addmm" \
        if min_rows < sys.maxsize else "addmm"

    @labelled(f"{label} + {attr}")
    def fn(x, w, b, attr_):
        if w is weight and b is bias and x.dtype is torch.float32 and x.device.type == "cpu" \
                and x.dim() >= 1 and x.shape[-1] == k:
            if x.dim() == 2:
                return product(x, None)
            if x.dim() == 1:
                return product(x.unsqueeze(0), None).squeeze(0)
            if x.is_contiguous():
                return product(x.view(x.numel() // k, k), None).view(*x.shape[:-1], n)
        out = linear(x, w, b)
        return out if act is None else act(out)

    @labelled(f"{label}(out=) + "
              f"{attr} (rank >= 3 folded to 2-D)")
    def out_fn(out, x, w, b, attr_):
        if w is weight and b is bias and x.dtype is torch.float32 and x.device.type == "cpu" \
                and x.dim() >= 1 and x.shape[-1] == k and out.shape[:-1] == x.shape[:-1] \
                and out.dim() == x.dim() and out.shape[-1] == n and x.is_contiguous() \
                and out.is_contiguous():
            if x.dim() == 2:
                product(x, out)
            elif x.dim() == 1:  # (``linear(out=)`` would resize ``out`` to (1, n) and back)
                product(x.unsqueeze(0), out.unsqueeze(0))
            else:
                rows = x.numel() // k
                product(x.view(rows, k), out.view(rows, n))
            return out
        linear(x, w, b, out=out)
        return out if act_ is None else act_(out)

    return fn, out_fn


def conv2d_pointwise_shapes(input, weight, bias, stride, padding, dilation, groups, attr):
    """``conv2d_pointwise_reference``'s result metadata: the activation (elementwise, a float
    result of a dense float tensor) keeps the convolution's dtype, shape and strides."""
    _activation(attr)
    out = torch.conv2d(input, weight, bias, stride, padding, dilation, groups)
    return out.contiguous(memory_format=torch.channels_last) if out.dim() == 4 else out


def linear_shapes(input, weight, bias=None):
    """``linear``'s result metadata: a contiguous tensor of ``(*input.shape[:-1], out)`` and
    the input's dtype, whatever the input's strides (ATen's CPU kernels make the product
    row-major, copying an input they cannot view as a matrix). Anything but a float matrix
    weight and an input of rank 1 or more runs ``linear`` itself (which raises where it
    must); an input whose last dimension does not fit raises when the model runs."""
    if weight.dim() != 2 or input.dim() < 1 or not input.is_floating_point():
        return torch._C._nn.linear(input, weight, bias)
    return input.new_empty((*input.shape[:-1], weight.shape[0]))


def linear_pointwise_shapes(input, weight, bias, attr):
    """``linear_pointwise_reference``'s result metadata: the product's (as above)."""
    _linear_postop(attr)
    return linear_shapes(input, weight, bias)


SHAPE_MEANINGS.update({"static_runtime::conv2d_pointwise": conv2d_pointwise_shapes,
                       "static_runtime::linear_pointwise": linear_pointwise_shapes,
                       "aten::linear": linear_shapes})

implement_torch_ops(((ATTENTION, attention_reference),
                     (MASKED_ATTENTION, masked_attention_reference),
                     (CONV2D_POINTWISE, conv2d_pointwise_reference),
                     (LINEAR_POINTWISE, linear_pointwise_reference)))
