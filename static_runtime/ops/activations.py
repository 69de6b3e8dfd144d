"""``aten::gelu`` (exact or tanh), ``aten::tanh``, ``aten::sigmoid`` and ``aten::silu`` on their
own — not taken into a product's epilogue — under ``StaticModuleOptions(
kernel_choice="measure")``: their kernel is chosen by measurement (``ops/kernels.py``) per
element count (up to the same power of two) and thread count, between

* ``aten``: PyTorch's operator (the default);
* ``native``: the vector functions of our GEMM's epilogue over the buffer
  (``ops/ckernels/eltwise.c``).

PyTorch's exact GELU pays ~5 µs a call before its first element (5.5 µs for 64 elements,
17.7 for 65,536 here) and its tanh runs at ~2 ns an element (133 µs for 65,536). Ours is
claimed for contiguous float32 CPU tensors (the result contiguous, as PyTorch's is for them);
anything else runs PyTorch's.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from static_runtime.ir.graph import Node
from static_runtime.ops import ckernels
from static_runtime.ops.kernels import KernelChooser, PerShape, size_bucket
from static_runtime.ops.registry import SHAPE_MEANINGS, labelled, register_measured
from static_runtime.ops.selection import constant_value

_aten = torch.ops.aten
_GELU = str(_aten.gelu.default._schema)
#: schema → the activation's name in ``ckernels.ACTIVATIONS`` (gelu's: by ``approximate``)
_SCHEMAS = {_GELU: "gelu", str(_aten.tanh.default._schema): "tanh",
            str(_aten.sigmoid.default._schema): "sigmoid",
            str(_aten.silu.default._schema): "silu"}

Pair = tuple[Callable[..., Any], Callable[..., Any]]


def _activation(node: Node) -> str | None:
    name = _SCHEMAS.get(node.schema or "")
    if name == "gelu":
        approximate = constant_value(node.inputs[1]) if len(node.inputs) > 1 else "none"
        return {"none": "gelu", "tanh": "gelu_tanh"}.get(approximate)
    return name


@register_measured("aten::gelu", "aten::tanh", "aten::sigmoid", "aten::silu")
def _measured(node: Node, chooser: KernelChooser, default: Pair) -> Pair | None:
    act = _activation(node)
    if act is None or act not in ckernels.ACTIVATIONS or not ckernels.available():
        return None
    run, code = ckernels.library().sr_activation, ckernels.ACTIVATIONS[act]
    default_fn, default_out = default
    per_shape = PerShape(chooser, ("aten", "native"))
    chosen = per_shape.chosen
    f32, threads, empty = torch.float32, torch.get_num_threads, torch.empty

    def native(x, out):
        run(x.data_ptr(), out.data_ptr(), x.numel(), code)
        return out

    def fresh(x):
        # (``empty(*dims)``: a ``torch.Size`` argument costs 1.36 µs against 0.60; a 0-dim
        # tensor has no dims to spread)
        shape = x.shape
        return empty(*shape) if shape else empty(())

    #: (element count, threads) → whether ours serves it: the call path's one lookup
    served: dict[tuple[int, int], bool] = {}

    def choose(x, rest, n: int, t: int) -> bool:
        """The choice for ``n``'s bucket (up to the same power of two), measured on the
        first count of it to come."""
        key = (torch.Size((size_bucket(n),)), t)
        name = chosen.get(key)
        if name is None:
            name = per_shape.choose(
                key, f"{act} float32 n<={key[0][0]} contiguous",
                lambda: {"aten": lambda: default_fn(x, *rest),
                         "native": lambda: native(x, fresh(x))})
        return name == "native"

    def ours(x, rest) -> bool:
        """Whether our kernel serves ``x``."""
        if x.dtype is not f32 or not x.is_cpu or not x.is_contiguous():
            return False
        n = x.numel()
        key = (n, threads())
        found = served.get(key)
        if found is None:
            found = ckernels.remember(served, key, n > 0 and choose(x, rest, n, key[1]))
        return found

    @labelled(f"{act}: kernel chosen per element count by measurement")
    def fn(x, *rest):
        if ours(x, rest):
            return native(x, fresh(x))  # (contiguous, as x is)
        return default_fn(x, *rest)

    @labelled(f"{act}: kernel chosen per element count by measurement, out=")
    def out_fn(out, x, *rest):
        if out.dtype is f32 and out.shape == x.shape and out.is_contiguous() and ours(x, rest):
            return native(x, out)
        return default_out(out, x, *rest)

    per_shape.expose(fn, (act,), ("n<=",))
    out_fn.status, out_fn.choices, out_fn.problem = fn.status, fn.choices, fn.problem
    return fn, out_fn


def _float_activation_shapes(op: Callable[..., Any]) -> Callable[..., Any]:
    """A float activation's result metadata, for shape programs: any elementwise operator of
    one float tensor gives its dtype, shape and strides (``TensorIterator``), and
    ``sigmoid``'s meta function over symbolic sizes costs ~0.1 ms where these activations'
    decompositions cost up to ~10 ms a node. Anything else runs ``op``."""
    def shapes(x, *args, **kwargs):
        if isinstance(x, torch.Tensor) and x.is_floating_point():
            return torch.sigmoid(x)
        return op(x, *args, **kwargs)

    return shapes


_nn = torch._C._nn
SHAPE_MEANINGS.update({f"aten::{name}": _float_activation_shapes(op) for name, op in (
    ("hardsigmoid", _nn.hardsigmoid), ("hardswish", _nn.hardswish),
    ("hardtanh", _nn.hardtanh), ("gelu", _nn.gelu), ("mish", _nn.mish), ("elu", _nn.elu),
    ("leaky_relu", _nn.leaky_relu), ("softplus", _nn.softplus), ("relu", torch.relu))})

