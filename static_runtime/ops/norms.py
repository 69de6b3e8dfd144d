"""``static_runtime::rms_norm`` (``passes/norms.py`` makes it): its meaning as ATen operators,
and under ``kernel_choice="measure"`` (the only option it is made with) a choice per input shape
and thread count, by measurement (``ops/kernels.py``), between

* ``aten``: the composite — the five operators it replaced, allocating (the default);
* ``native``: our kernel (``ops/ckernels/norms.c``): one pass for the squares, one to scale,

for a contiguous float32 CPU input whose last dimension is the constant weight's length;
anything else runs the composite.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from static_runtime.ir.graph import Node
from static_runtime.ir.own_ops import RMS_NORM
from static_runtime.ops import ckernels
from static_runtime.ops.ckernels.layers import rms_norm
from static_runtime.ops.enums import Kind, enum_table
from static_runtime.ops.kernels import KernelChooser, PerShape
from static_runtime.ops.registry import (
    implement_torch_ops,
    labelled,
    register_measured,
    register_native,
)
from static_runtime.ops.selection import constant_value


def rms_norm_reference(input, weight, eps, dtype=None):
    """What ``static_runtime::rms_norm`` means: the operators it replaced, in their order
    (``dtype`` a ``torch.dtype``, or the int TorchScript spells one with)."""
    h = input * torch.rsqrt(input.pow(2).mean(-1, keepdim=True) + eps)
    return weight * (h if dtype is None else h.to(_dtype(dtype)))


def _dtype(dtype: Any) -> torch.dtype:
    """A ``torch.dtype``, whether given as one or as the int TorchScript spells it with."""
    return enum_table(Kind.DTYPE)[dtype] if isinstance(dtype, int) else dtype


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
    chosen = per_shape.chosen
    native: list[Callable | None] = [None]
    f32, threads = torch.float32, torch.get_num_threads

    def run_native(x):
        if native[0] is None:
            native[0] = rms_norm(weight, eps)
        return native[0](x)

    def decide(x, key) -> str:
        return per_shape.choose(key, f"rms_norm float32 x={tuple(x.shape)} contiguous",
                                lambda: {"aten": lambda: default(x, weight, eps, dtype),
                                         "native": lambda: run_native(x)})

    @labelled("rms_norm: kernel chosen per input shape by measurement")
    def fn(x, w, eps_, dtype_):
        if w is weight and x.dtype is f32 and x.is_cpu and x.dim() >= 1 \
                and x.shape[-1] == h and x.is_contiguous():
            key = (x.shape, threads())
            if (chosen.get(key) or decide(x, key)) == "native":
                return run_native(x)
        return default(x, w, eps_, dtype_)

    return per_shape.expose(fn, ("rms_norm", h))


implement_torch_ops(((RMS_NORM, rms_norm_reference),))
