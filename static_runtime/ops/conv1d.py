"""``aten::conv1d`` with a constant weight: under ``StaticModuleOptions(kernel_choice=
"measure")`` its kernel is chosen by measurement (``ops/kernels.py``) per thread count and
bucket of positions (batch × length, up to the same power of two: a new length measures
nothing where its bucket was measured), as ``ops/conv.py`` does for the fused 2-D convolution
by pixels.

The candidates, each returning what ``conv1d`` returns (a contiguous tensor):

* ``aten``: ``conv1d`` itself (what runs without measuring). ATen runs a dilated 1-D
  convolution on its slow generic path (45–60 µs at 32 channels × 128 steps, one thread,
  against 13 µs undilated);
* ``native``: our own kernels (``ops/ckernels``) on the same 2-D view, through channels-last
  copies (below), for one group or one filter per channel;
* ``pointwise`` (a 1 × 1 kernel, stride 1, no padding): each group's product by ``matmul``,
  which takes any input strides — the candidate a strided input is measured with, beside
  ``aten`` (the others take contiguous inputs);
* ``im2col`` (one group, a kernel wider than 1): the windows of the input as one matrix
  (``unfold``) times the weight — one product where the kernels above pay per output
  position (a raw waveform's first convolution);
* ``onednn``: the (N, C, L) input viewed as (N, C, 1, L) and convolved as 2-D by oneDNN's
  ``_convolution_pointwise`` on the (O, I/g, 1, K) weight reordered once (stride, padding
  and dilation on the width); with a contiguous input oneDNN writes a contiguous output,
  which ``squeeze(2)`` views as eager's. ~20 µs whatever the dilation: its fixed cost per call
  loses to ATen on small undilated and 1 × 1 convolutions, wins on dilated ones.

Nothing else changes: other dtypes, devices, ranks, non-contiguous inputs (but for a 1 × 1
kernel's) or the meta tensors of planning take ``conv1d``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from static_runtime.ir.graph import Node
from static_runtime.ops import ckernels
from static_runtime.ops.kernels import KernelChooser, PerShape, size_bucket
from static_runtime.ops.registry import labelled, register_measured, register_native
from static_runtime.ops.selection import constant_value

CONV1D = str(torch.ops.aten.conv1d.default._schema)


def _constants(node: Node) -> tuple | None:
    """(weight, bias, stride, padding, dilation, groups) when all are constants of a float32
    3-D weight, else None."""
    if node.schema != CONV1D:
        return None
    values = [constant_value(v) for v in node.inputs[1:]]
    if any(v is NotImplemented for v in values):
        return None
    weight, bias, stride, padding, dilation, groups = values
    if not (isinstance(weight, torch.Tensor) and weight.dtype is torch.float32
            and weight.dim() == 3 and weight.layout == torch.strided and not weight.is_meta
            and (bias is None or (isinstance(bias, torch.Tensor) and bias.dim() == 1
                                  and bias.dtype is torch.float32))
            and isinstance(groups, int)):
        return None
    return weight, bias, list(stride), list(padding), list(dilation), groups


@register_native("aten::conv1d")
def _conv1d(node: Node):
    """``conv1d`` as the fallback would call it; a native so that the measured choice below
    can take its place (only out variants and natives are measured)."""
    if _constants(node) is None:
        return None
    conv1d = torch.conv1d

    @labelled("torch.conv1d")
    def fn(x, w, b, stride, padding, dilation, groups):
        return conv1d(x, w, b, stride, padding, dilation, groups)

    return fn


@register_measured("aten::conv1d")
def _measured_conv1d(node: Node, chooser: KernelChooser, default: Callable[..., Any]
                     ) -> Callable[..., Any] | None:
    found = _constants(node)
    return None if found is None else measured_conv1d(found, chooser, default)


def measured_conv1d(found: tuple, chooser: KernelChooser, default: Callable[..., Any]
                    ) -> Callable[..., Any] | None:
    """``fn(x, weight, bias, *rest)`` choosing per bucket of positions among our candidates
    for the convolution of ``found`` (``_constants``' tuple); anything else runs ``default(x, w, b,
    *rest)`` (``conv1d``, or ``_convolution`` as a traced model records it:
    ``ops/conv_plain.py``)."""
    if not torch.backends.mkldnn.is_available():
        return None
    weight, bias, stride, padding, dilation, groups = found
    if not (len(stride) == len(padding) == len(dilation) == 1):
        return None
    kernels = {"aten": _aten(*found), "onednn": _OneDnn(*found)}
    if (groups == 1 or (groups == weight.shape[0] and weight.shape[1] == 1)) \
            and ckernels.available():
        kernels["native"] = _Native(*found)
    if groups == 1 and weight.shape[2] > 1:
        kernels["im2col"] = _Im2col(*found)
    if weight.shape[2] == 1 and stride == [1] and padding == [0]:
        kernels["pointwise"] = _Pointwise(weight, bias, groups)
    #: what a strided input is measured among (the others take contiguous inputs)
    strided = {n: k for n, k in kernels.items() if n in ("aten", "pointwise")}
    takes_strided = len(strided) > 1  # (decided here, not on each call)
    per_shape = PerShape(chooser, tuple(kernels))
    chosen = per_shape.chosen
    f32, threads = torch.float32, torch.get_num_threads
    spec = (f"w={tuple(weight.shape)} stride={stride} padding={padding} dilation={dilation} "
            f"groups={groups} bias={bias is not None}")

    def decide(x: torch.Tensor, key: tuple) -> str:
        # (a bucket of positions, as a 2-D convolution's pixels: traffic of every length
        # brings a new one on most calls, and a measurement costs ~20 ms)
        dense = key[0][1]
        among = kernels if dense else strided
        layout = "contiguous" if dense else "strided"
        return per_shape.choose(key, f"conv1d float32 positions<={key[0][0]} {layout} {spec}",
                                lambda: {n: (lambda k=k: k(x)) for n, k in among.items()})

    @labelled("conv1d: kernel chosen per bucket of positions by measurement")
    def fn(x, w, b, *rest):
        if w is weight and b is bias and x.dtype is f32 and x.dim() == 3 \
                and x.is_cpu and not x.is_mkldnn:
            dense = x.is_contiguous()
            if dense or takes_strided:
                shape = x.shape  # (its channels are the weight's: not part of the key)
                key = ((size_bucket(shape[0] * shape[2]), dense), threads())
                return kernels[chosen.get(key) or decide(x, key)](x)
        return default(x, w, b, *rest)

    return per_shape.expose(fn, ("conv1d", tuple(weight.shape), stride, padding, dilation,
                                 groups, bias is not None), ("positions<=", "contiguous="))


def _aten(weight, bias, stride, padding, dilation, groups):
    conv1d = torch.conv1d

    def aten(x):
        return conv1d(x, weight, bias, stride, padding, dilation, groups)

    return aten


class _OneDnn:
    """The 1-D convolution as a 2-D one of height 1 on oneDNN, the weight reordered on first
    use (only a measurement that tries it pays for that)."""

    def __init__(self, weight, bias, stride, padding, dilation, groups):
        self.weight, self.bias, self.groups = weight.unsqueeze(2), bias, groups
        self.stride, self.padding = [1, stride[0]], [0, padding[0]]
        self.dilation = [1, dilation[0]]
        self.packed: torch.Tensor | None = None
        self.pointwise = torch.ops.mkldnn._convolution_pointwise.default

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        if self.packed is None:
            self.packed = torch.ops.mkldnn._reorder_convolution_weight(
                self.weight, self.padding, self.stride, self.dilation, self.groups)
        out = self.pointwise(x.unsqueeze(2), self.packed, self.bias, self.padding, self.stride,
                             self.dilation, self.groups, "none", [], "")
        # contiguous already unless oneDNN read a one-channel input as channels-last
        return out.squeeze(2).contiguous()


class _Native:
    """The 1-D convolution as a 2-D one of height 1 by our own kernels (``ops/ckernels``:
    the implicit GEMM, or the depthwise loop for one filter per channel), made on first use.
    They read and write channels-last memory, so the input is transposed into it and the
    result back (two copies, ~1 µs each at a TCN's sizes)."""

    def __init__(self, weight, bias, stride, padding, dilation, groups):
        self.args = (weight.unsqueeze(2), bias, [1, stride[0]], [0, padding[0]],
                     [1, dilation[0]])
        self.depthwise = groups > 1
        self.kernel: Callable[[torch.Tensor], torch.Tensor] | None = None

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        if self.kernel is None:
            if self.depthwise:
                self.kernel = ckernels.depthwise_conv2d(*self.args, "none")
            else:
                self.kernel = ckernels.Conv2d(*self.args).kernel()
        return self.kernel(x.unsqueeze(2)).squeeze(2).contiguous()


class _Im2col:
    """The convolution as one product: the input's windows (``unfold``, views) as the (N,
    Cin·K, L') matrix — made in one copy, a view of the input itself for one input channel —
    times the (Cout, Cin·K) weight, the bias added to the contiguous (N, Cout, L') result. A
    raw waveform's first convolution (one channel, kernel 10, stride 5: every output a
    product of 10), which the kernels above run per output position, measured 0.68–0.81 ×
    the next best in the zoo's audio models at batch 8 (BENCHMARKS.md, "Session 25")."""

    def __init__(self, weight, bias, stride, padding, dilation, groups):
        cout, cin, k = weight.shape
        self.weight = weight.detach().reshape(cout, cin * k).contiguous()
        self.bias = None if bias is None else bias.detach().reshape(cout, 1)
        self.cin, self.k = cin, k
        self.stride, self.padding, self.dilation = stride[0], padding[0], dilation[0]
        self.span = self.dilation * (k - 1) + 1

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        if self.padding:
            x = torch.constant_pad_nd(x, [self.padding, self.padding])
        windows = x.unfold(2, self.span, self.stride)  # (N, Cin, L', span)
        if self.dilation > 1:
            windows = windows[..., ::self.dilation]
        n, _, length, _ = windows.shape
        columns = windows.permute(0, 1, 3, 2).reshape(n, self.cin * self.k, length)
        y = torch.matmul(self.weight, columns)
        if self.bias is not None:
            y.add_(self.bias)
        return y


class _Pointwise:
    """A 1 × 1 convolution (stride 1, no padding) as the product it is: each group's
    (out/g, in/g) weight times its channels at every position — ``matmul`` batched over the
    batch and the groups, of any input strides (a ``(B, L, C)`` activation permuted to
    ``(B, C, L)``, as SqueezeBERT's and a Conformer's pointwise convolutions take it: ATen's
    grouped convolution runs ~16 µs there at 64 channels × 12 positions, one thread), then
    the bias. The result is contiguous, as ``conv1d``'s."""

    def __init__(self, weight: torch.Tensor, bias: torch.Tensor | None, groups: int):
        out, per = weight.shape[0], weight.shape[1]
        self.groups, self.out, self.per = groups, out, per
        self.weight = weight.detach().reshape(groups, out // groups, per).contiguous()
        self.bias = None if bias is None else bias.detach().reshape(out, 1)

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        n, _, length = x.shape
        y = torch.matmul(self.weight, x.reshape(n, self.groups, self.per, length))
        y = y.view(n, self.out, length)
        if self.bias is not None:
            y.add_(self.bias)
        return y
