"""``static_runtime::conv2d_residual`` (``passes/residual.py`` makes it): ``act(conv2d(x, W, b)
+ r)``, a residual block's last convolution with its shortcut added and the activation after
it. Its meaning is that composite, the convolution laid out channels-last as
``conv2d_pointwise`` lays it out (``conv2d_residual_reference``); under
``kernel_choice="measure"`` (the only option it is made with) a choice per pixel count (up to
the same power of two), input layout and thread count, by measurement (``ops/kernels.py``),
between

* ``onednn``: ``mkldnn._convolution_pointwise.binary`` on the weight reordered once, the
  add and a ReLU as its post-ops (other activations, which it does not take after an add,
  in place on its result; the default);
* ``native`` (one group): our implicit GEMM (``ops/ckernels/gemm.c``,
  ``sr_conv2d_res_block``) adding the residual to each finished sum and applying the
  activation before it stores it: one pass, no pass over the result for the add and another
  for the activation,

for a float32 4-D CPU input (channels-last, or contiguous) and a channels-last float32 CPU
residual of the result's shape; anything else runs the composite. Both write a
channels-last result, as ``add`` of the channels-last convolution and such a residual does.
Where ours is chosen the out variant writes the planned arena tensor; elsewhere it hands back
the chosen kernel's result (``registry.hands_back``).
"""

from __future__ import annotations

from typing import Any

import torch

from static_runtime.ir.graph import Node
from static_runtime.ir.own_ops import CONV2D_RESIDUAL
from static_runtime.ops import ckernels
from static_runtime.ops.ckernels import remember
from static_runtime.ops.ckernels.convs import output_size
from static_runtime.ops.kernels import KernelChooser, PerShape, size_bucket
from static_runtime.ops.native.fused import (
    CONV_POSTOPS,
    conv2d_pointwise_reference,
    conv2d_pointwise_shapes,
)
from static_runtime.ops.registry import (
    SHAPE_MEANINGS,
    hands_back,
    implement_torch_ops,
    labelled,
    register_measured,
    register_native,
    register_out_variant,
)
from static_runtime.ops.selection import constant_value


def _postop(attr: str) -> tuple:
    if attr not in CONV_POSTOPS:
        raise ValueError(f"static_runtime::conv2d_residual: attr must be one of "
                         f"{sorted(CONV_POSTOPS)}, got {attr!r}")
    return CONV_POSTOPS[attr]


def conv2d_residual_reference(input, weight, bias, stride, padding, dilation, groups, residual,
                              attr: str):
    """What ``static_runtime::conv2d_residual`` means: the operators it replaced."""
    act = _postop(attr)[0]
    y = conv2d_pointwise_reference(input, weight, bias, stride, padding, dilation, groups,
                                   "none") + residual
    return y if act is None else act(y)


def conv2d_residual_shapes(input, weight, bias, stride, padding, dilation, groups, residual,
                           attr: str):
    """``conv2d_residual_reference``'s result metadata: the channels-last convolution's
    (``conv2d_pointwise_shapes``) added to the residual as ``add``'s meta function lays the
    sum out; the activation keeps the sum's."""
    _postop(attr)
    return torch.add(conv2d_pointwise_shapes(input, weight, bias, stride, padding, dilation,
                                             groups, "none"), residual)


SHAPE_MEANINGS["static_runtime::conv2d_residual"] = conv2d_residual_shapes

_COMPOSITE = "act(conv2d(x, W, b) + residual) by ATen operators"


@register_native("static_runtime::conv2d_residual")
def _native(node: Node):
    return labelled(_COMPOSITE)(conv2d_residual_reference)


@register_out_variant("static_runtime::conv2d_residual")
def _out_variant(node: Node):
    """The convolution allocating, the sum written into the planned tensor, the activation
    in place there."""
    add = torch.add

    def out_fn(out, x, weight, bias, stride, padding, dilation, groups, residual, attr):
        add(conv2d_pointwise_reference(x, weight, bias, stride, padding, dilation, groups,
                                       "none"), residual, out=out)
        act_ = _postop(attr)[1]
        if act_ is not None:
            act_(out)
        return out

    return (labelled(_COMPOSITE)(conv2d_residual_reference),
            labelled(f"{_COMPOSITE}, out=")(out_fn))


def _constants(node: Node) -> tuple | None:
    """(weight, bias, stride, padding, dilation, groups, attr) where every one is a constant
    our candidates take, else None."""
    if node.schema != CONV2D_RESIDUAL:
        return None
    values = tuple(constant_value(v) for v in (*node.inputs[1:7], node.inputs[8]))
    if any(v is NotImplemented for v in values):
        return None
    weight, bias, stride, padding, dilation, _, attr = values
    if not (isinstance(weight, torch.Tensor) and weight.dtype is torch.float32
            and weight.dim() == 4 and weight.layout == torch.strided and not weight.is_meta
            and (bias is None or (isinstance(bias, torch.Tensor) and bias.dim() == 1
                                  and bias.dtype is torch.float32))
            and attr in CONV_POSTOPS and len(stride) == len(padding) == len(dilation) == 2):
        return None
    return values


@register_measured("static_runtime::conv2d_residual")
def _measured(node: Node, chooser: KernelChooser, default: Any) -> Any:
    """``(fn, out_fn)`` where ``default`` is the out variant's pair, else ``fn``."""
    found = _constants(node)
    if found is None or not torch.backends.mkldnn.is_available():
        return None
    weight, bias, stride, padding, dilation, groups, attr = found
    stride, padding, dilation = list(stride), list(padding), list(dilation)
    paired = isinstance(default, tuple)
    default_fn, default_out = default if paired else (default, None)
    # (every activation a fused convolution takes is one our kernel applies in its epilogue)
    ours_offered = groups == 1 and attr in ckernels.ACTIVATIONS and ckernels.available()
    per_shape = PerShape(chooser, ("onednn", "native") if ours_offered else ("onednn",),
                         default="onednn")
    act_ = CONV_POSTOPS[attr][1]
    # (oneDNN's convolution takes a unary post-op after a binary one only for relu: the
    # others are applied in place on its result)
    unary = "relu" if attr == "relu" else None
    onednn_after = act_ if attr not in ("none", "relu") else None
    cout, cin, kh, kw = weight.shape
    made: dict[str, Any] = {}
    f32, cl, threads = torch.float32, torch.channels_last, torch.get_num_threads

    def onednn():
        if "onednn" not in made:
            packed = torch.ops.mkldnn._reorder_convolution_weight(weight, padding, stride,
                                                                  dilation, groups)
            binary = torch.ops.mkldnn._convolution_pointwise.binary

            def run(x, r):
                out = binary(x, r, packed, bias, padding, stride, dilation, groups, "add",
                             None, unary, [], "")
                return out if onednn_after is None else onednn_after(out)

            made["onednn"] = run
        return made["onednn"]

    def native(shape: torch.Size, channels_first: bool):
        """Our call for inputs of ``shape``: ``(x, r) -> result``, with ``.into``."""
        if "native" not in made:
            made["native"] = ckernels.Conv2d(weight, bias, stride, padding, dilation,
                                             attr).kernel()
        return made["native"].residual_for(shape, channels_first)

    #: (x's shape, channels-last, the residual's shape, threads) → the call for them, or None
    #: where the composite answers (an input of another channel count, a residual of another
    #: shape than the result's: one that broadcasts)
    calls: dict[tuple, Any] = {}

    def call_for(x: torch.Tensor, r: torch.Tensor, key: tuple):
        n_, channels, h, w = key[0]
        oh, ow = output_size(h, w, kh, kw, stride, padding, dilation)
        if channels != cin * groups or oh < 1 or ow < 1 or tuple(key[2]) != (n_, cout, oh, ow):
            return remember(calls, key, None)
        bucket = ((size_bucket(n_ * h * w), key[1]), key[3])
        name = per_shape.chosen.get(bucket)
        if name is None:
            theirs, mine = onednn(), native(key[0], not key[1]) if ours_offered else None
            name = per_shape.choose(
                bucket, f"conv2d_residual+{attr} float32 pixels<={bucket[0][0]} "
                        f"{'channels_last' if key[1] else 'contiguous'} w={tuple(weight.shape)} "
                        f"stride={stride} padding={padding} dilation={dilation} "
                        f"groups={groups} bias={bias is not None}",
                lambda: {"onednn": lambda: theirs(x, r),
                         **({"native": lambda: mine(x, r)} if mine is not None else {})})
        return remember(calls, key, native(key[0], not key[1]) if name == "native"
                        else onednn())

    def key_of(x, r) -> tuple | None:
        """The call key of these arguments, or None where the composite answers."""
        if x.dtype is f32 and r.dtype is f32 and x.dim() == 4 and x.is_cpu and r.is_cpu \
                and not x.is_mkldnn and r.is_contiguous(memory_format=cl):
            channels_last = x.is_contiguous(memory_format=cl)
            if channels_last or x.is_contiguous():
                return (x.shape, channels_last, r.shape, threads())
        return None

    @labelled(f"conv2d_residual ({attr}): kernel chosen per input shape by measurement")
    def fn(x, w, b, stride_, padding_, dilation_, groups_, r, attr_):
        if w is weight and b is bias:
            key = key_of(x, r)
            if key is not None:
                call = calls[key] if key in calls else call_for(x, r, key)
                if call is not None:
                    return call(x, r)
        return default_fn(x, w, b, stride_, padding_, dilation_, groups_, r, attr_)

    @hands_back
    @labelled(f"conv2d_residual ({attr}): kernel chosen per input shape by measurement, into "
              f"the arena where ours is chosen")
    def out_fn(out, x, w, b, stride_, padding_, dilation_, groups_, r, attr_):
        if w is weight and b is bias:
            key = key_of(x, r)
            if key is not None:
                call = calls[key] if key in calls else call_for(x, r, key)
                if call is not None:
                    into = getattr(call, "into", None)
                    if into is not None and out.dtype is f32 and out.is_cpu \
                            and out.shape == call.out_shape \
                            and out.is_contiguous(memory_format=cl) \
                            and out.data_ptr() != x.data_ptr():
                        into(x, r, out)
                        return out
                    return call(x, r)  # (its own result)
        return default_out(out, x, w, b, stride_, padding_, dilation_, groups_, r, attr_)

    problem = ("conv2d_residual", tuple(weight.shape), stride, padding, dilation, groups,
               bias is not None, attr)
    sizes = ("pixels<=", "channels-last=")
    per_shape.expose(fn, problem, sizes)
    if not paired:
        return fn
    return fn, per_shape.expose(out_fn, problem, sizes)


implement_torch_ops(((CONV2D_RESIDUAL, conv2d_residual_reference),))
