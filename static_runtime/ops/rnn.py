"""``aten::lstm`` / ``aten::gru`` with constant weights: under ``StaticModuleOptions(
kernel_choice="measure")`` their kernel is chosen per input shape and thread count by
measurement (``ops/kernels.py``), as ``ops/conv1d.py`` does for 1-D convolutions.

The candidates, each returning ATen's outputs:

* ``aten``: ``torch.lstm`` / ``torch.gru`` (what runs without measuring: a loop of ATen
  operators per step for the GRU, oneDNN's RNN primitive for the LSTM);
* ``native``: our own kernels (``ops/ckernels``: the input projections of all steps as one
  GEMM per layer and direction, then the steps in C) — where a compiler could build them.

Only plain layers in inference are claimed (``train`` false, no LSTM projection), on a
contiguous 3-D float32 CPU input with the initial states given; anything else — the meta
tensors of planning, unbatched input — takes ATen's operator.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from static_runtime.ir.graph import Node
from static_runtime.ops import ckernels
from static_runtime.ops.ckernels.layers import Recurrent
from static_runtime.ops.kernels import KernelChooser, PerShape
from static_runtime.ops.native.recurrent import plain_layer
from static_runtime.ops.registry import labelled, register_measured, register_native

_SCHEMAS = {"lstm": str(torch.ops.aten.lstm.input._schema),
            "gru": str(torch.ops.aten.gru.input._schema)}
_ATEN = {"lstm": torch.lstm, "gru": torch.gru}


def _constants(node: Node, mode: str) -> tuple | None:
    return plain_layer(node, _SCHEMAS[mode], mode)


def _native_factory(mode: str):
    aten = _ATEN[mode]

    def factory(node: Node):
        """ATen's operator as the fallback would call it; a native so that the measured choice
        below can take its place (only out variants and natives are measured)."""
        if _constants(node, mode) is None:
            return None

        @labelled(f"torch.{mode}")
        def fn(*args):
            return aten(*args)

        return fn

    return factory


def _measured_factory(mode: str):
    aten = _ATEN[mode]
    lstm = mode == "lstm"

    def factory(node: Node, chooser: KernelChooser, default: Callable[..., Any]
                ) -> Callable[..., Any] | None:
        found = _constants(node, mode)
        if found is None or not ckernels.available():
            return None
        params, weights, has_biases, num_layers, bidirectional, batch_first = found
        per_shape = PerShape(chooser, ("aten", "native"))
        chosen = per_shape.chosen
        native: list[Recurrent | None] = [None]
        f32, threads = torch.float32, torch.get_num_threads
        spec = (f"{mode} weights={[tuple(w.shape) for w in weights[:2]]} layers={num_layers} "
                f"bidirectional={bidirectional} batch_first={batch_first} bias={has_biases}")

        def run_native(x, state):
            if native[0] is None:
                native[0] = Recurrent(mode, weights, has_biases, num_layers,
                                               bidirectional, batch_first)
            return native[0](x, *state)

        def decide(x, hx, state, rest, key) -> str:
            name = per_shape.choose(key, f"{mode} float32 x={tuple(x.shape)} contiguous {spec}",
                                    lambda: {"aten": lambda: aten(x, hx, params, *rest)[0],
                                             "native": lambda: run_native(x, state)[0]})
            if name != "native" and "native" not in chosen.values():
                native[0] = None  # its packed weights serve no shape
            return name

        @labelled(f"{mode}: kernel chosen per input shape by measurement")
        def fn(x, hx, params_, *rest):
            if params_ is params and x.dtype is f32 and x.dim() == 3 and x.is_cpu \
                    and x.is_contiguous() and x.numel() > 0:
                state = tuple(hx) if lstm else (hx,)
                batch = x.shape[0] if batch_first else x.shape[1]
                if all(isinstance(s, torch.Tensor) and s.dtype is f32 and s.is_cpu
                       and s.dim() == 3 and s.shape[1] == batch for s in state):
                    key = (x.shape, threads())
                    name = chosen.get(key) or decide(x, hx, state, rest, key)
                    if name == "native":
                        return run_native(x, state)
            return default(x, hx, params_, *rest)

        return per_shape.expose(fn, (mode, num_layers, bidirectional, batch_first,
                                     tuple(weights[1].shape)))

    return factory


for _mode in ("lstm", "gru"):
    register_native(f"aten::{_mode}")(_native_factory(_mode))
    register_measured(f"aten::{_mode}")(_measured_factory(_mode))
