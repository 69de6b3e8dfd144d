"""Convolutions left unfused — ``aten::conv2d``, and ``aten::_convolution`` as a traced model
records one (a traced 1-D one gets ``ops/conv1d.py``'s candidates: Whisper's and wav2vec2's
front ends) — with a constant weight, under ``kernel_choice="measure"``: their kernel chosen by
measurement per pixel count (N × H × W up to the same power of two), layout and thread count,
between

* ``aten``: the operator itself (the default);
* ``native``: our kernel (``ops/ckernels``: the implicit GEMM, which reads a channels-first
  input as it is; a depthwise loop; a GEMM for 1 × 1), its channels-last result made
  contiguous again for a contiguous input — the layout ATen gives.

``fuse_convolution`` fuses only a convolution whose channels-last output reaches operators
that do not care about layout; one whose output is flattened — a vision transformer's patch
embedding (``flatten(2).transpose(1, 2)``) — stays an ATen operator. ATen's convolution pays
~40 µs a call at a ViT's patch embedding of 3 → 96 channels, 8 × 8 stride 8 on a 32 × 32
image; ours a few. Claimed for float32 4-D CPU inputs, contiguous or channels-last, and
weights of one group or depthwise; a transposed convolution, or one with output padding, and
anything else run ATen's.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from static_runtime.ir.graph import Node
from static_runtime.ops import ckernels
from static_runtime.ops.ckernels import remember
from static_runtime.ops.conv import ConvKernels
from static_runtime.ops.conv1d import measured_conv1d
from static_runtime.ops.kernels import KernelChooser, PerShape, size_bucket
from static_runtime.ops.registry import labelled, register_measured, register_native
from static_runtime.ops.selection import constant_value

_aten = torch.ops.aten
_CONV2D = str(_aten.conv2d.default._schema)
_CONVOLUTION = str(_aten._convolution.default._schema)


def _plain(node: Node, rank: int = 4) -> tuple | None:
    """``(weight, bias, stride, padding, dilation, groups)`` of a convolution ours can take
    with a weight of ``rank`` (4: 2-D, 3: 1-D), else None."""
    if node.schema == _CONV2D and len(node.inputs) == 7 and rank == 4:
        args = [constant_value(v) for v in node.inputs[1:]]
    elif node.schema == _CONVOLUTION and len(node.inputs) == 13:
        args = [constant_value(v) for v in node.inputs[1:9]]
        transposed, output_padding = args[5], args[6]
        if transposed is not False or not isinstance(output_padding, (list, tuple)) \
                or any(p != 0 for p in output_padding):
            return None
        args = args[:5] + [args[7]]
    else:
        return None
    weight, bias, stride, padding, dilation, groups = args
    if not (isinstance(weight, torch.Tensor) and weight.dtype is torch.float32
            and weight.dim() == rank and weight.layout == torch.strided and not weight.is_meta
            and weight.numel() and (bias is None or (isinstance(bias, torch.Tensor)
                                                     and bias.dtype is torch.float32
                                                     and bias.shape == weight.shape[:1]))
            and type(groups) is int
            and all(isinstance(a, (list, tuple)) and len(a) == rank - 2
                    and all(type(e) is int for e in a) for a in (stride, padding, dilation))):
        return None
    return weight, bias, list(stride), list(padding), list(dilation), groups


@register_native("aten::conv2d", "aten::_convolution")
def _native(node: Node):
    """The operator as it is, for the nodes ours may be measured against (others: the
    fallback's binding)."""
    if _plain(node) is None and _plain(node, 3) is None:
        return None
    if node.schema == _CONV2D:
        return labelled("torch.conv2d")(torch.conv2d)
    return labelled("torch._convolution")(torch._convolution)


@register_measured("aten::conv2d", "aten::_convolution")
def _measured(node: Node, chooser: KernelChooser, default: Callable[..., Any]
              ) -> Callable[..., Any] | None:
    one_d = _plain(node, 3)
    if one_d is not None:  # a traced conv1d: ops/conv1d.py's candidates
        return measured_conv1d(one_d, chooser, default)
    found = _plain(node)
    if found is None or not ckernels.available():
        return None
    weight, bias, stride, padding, dilation, groups = found
    kernels = ConvKernels(weight, bias, stride, padding, dilation, groups, "none")
    if "native" not in kernels.names():
        return None
    per_shape = PerShape(chooser, ("aten", "native"))
    f32, cl, threads = torch.float32, torch.channels_last, torch.get_num_threads
    #: (x's shape, channels-last, threads) → ours for that shape and layout, or None (ATen's)
    calls: dict[tuple, Any] = {}
    spec = (f"w={tuple(weight.shape)} stride={stride} padding={padding} dilation={dilation} "
            f"groups={groups} bias={bias is not None}")

    def ours(shape: torch.Size, channels_last: bool):
        direct = kernels.direct("native", shape, channels_last) or kernels.kernel("native")
        if channels_last:
            return direct
        return lambda x: direct(x).contiguous()  # (ATen's layout for a contiguous input)

    def decide(x, rest, key):
        n, _, h, w = x.shape
        bucket = (torch.Size((size_bucket(n * h * w), int(key[1]))), key[2])
        call = ours(x.shape, key[1])
        name = per_shape.chosen.get(bucket)
        if name is None:
            name = per_shape.choose(
                bucket, f"conv2d float32 pixels<={bucket[0][0]} "
                        f"{'channels_last' if key[1] else 'contiguous'} {spec}",
                lambda: {"aten": lambda: default(x, weight, bias, *rest),
                         "native": lambda: call(x)})
        return remember(calls, key, call if name == "native" else None)

    @labelled("conv2d: kernel chosen per input shape by measurement")
    def fn(x, w, b, *rest):
        if w is weight and b is bias and x.dtype is f32 and x.dim() == 4 and x.is_cpu \
                and not x.is_mkldnn:
            contiguous = x.is_contiguous()
            channels_last = not contiguous and x.is_contiguous(memory_format=cl)
            if contiguous or channels_last:
                key = (x.shape, channels_last, threads())
                call = calls[key] if key in calls else decide(x, rest, key)
                if call is not None:
                    return call(x)
        return default(x, w, b, *rest)

    return per_shape.expose(fn, ("conv2d_unfused", tuple(weight.shape), stride, padding,
                                 dilation, groups), ("pixels<=", "channels_last="))
