"""``aten::lstm`` / ``aten::gru`` and their cells ``aten::lstm_cell`` / ``aten::gru_cell``
with constant weights: under ``StaticModuleOptions(kernel_choice="measure")`` their kernel is
chosen per batch and sequence length up to the same powers of two (a cell's: per batch) and
thread count by measurement (``ops/kernels.py``), as ``ops/conv1d.py`` does for 1-D
convolutions: a new length measures nothing where its bucket was measured.

The candidates, each returning ATen's outputs:

* ``aten``: ``torch.lstm`` / ``torch.gru`` (what runs without measuring: a loop of ATen
  operators per step for the GRU, oneDNN's RNN primitive for the LSTM);
* ``native``: our own kernels (``ops/ckernels``: the input projections of all steps as one
  GEMM per layer and direction, then the steps in C; a cell's two products and its gates in
  one call) — where a compiler could build them.

Only plain layers in inference are claimed (``train`` false, no LSTM projection), on a 3-D
float32 CPU input (a strided one copied for ours, the copy timed with it) with the initial
states given, and cells on a contiguous 2-D
float32 CPU input and states (``nn.GRUCell`` / ``nn.LSTMCell`` make an unbatched input 2-D
before the call); anything else — the meta tensors of planning, unbatched input — takes
ATen's operator.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from static_runtime.ir.graph import Node
from static_runtime.ops import ckernels
from static_runtime.ops.ckernels.layers import Cell, Recurrent
from static_runtime.ops.kernels import KernelChooser, PerShape, size_bucket
from static_runtime.ops.native.recurrent import plain_layer
from static_runtime.ops.registry import labelled, register_measured, register_native
from static_runtime.ops.selection import constant_value

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
            layout = "contiguous" if x.is_contiguous() else "strided"
            (batch, steps), _ = key
            name = per_shape.choose(key, f"{mode} float32 B<={batch} T<={steps} {layout} {spec}",
                                    lambda: {"aten": lambda: aten(x, hx, params, *rest)[0],
                                             "native": lambda: run_native(
                                                 x.contiguous(), state)[0]})
            if name != "native" and "native" not in chosen.values():
                native[0] = None  # its packed weights serve no shape
            return name

        @labelled(f"{mode}: kernel chosen per batch and length bucket by measurement")
        def fn(x, hx, params_, *rest):
            if params_ is params and x.dtype is f32 and x.dim() == 3 and x.is_cpu \
                    and x.numel() > 0:
                state = tuple(hx) if lstm else (hx,)
                batch = x.shape[0] if batch_first else x.shape[1]
                if all(isinstance(s, torch.Tensor) and s.dtype is f32 and s.is_cpu
                       and s.dim() == 3 and s.shape[1] == batch for s in state):
                    steps = x.shape[1] if batch_first else x.shape[0]
                    # (its features are the weights': not part of the key)
                    key = ((size_bucket(batch), size_bucket(steps)), threads())
                    name = chosen.get(key) or decide(x, hx, state, rest, key)
                    if name == "native":
                        # (a strided input — a conv net's (B, C, T) output transposed — is
                        # copied for ours, and the copy was timed with it)
                        return run_native(x if x.is_contiguous() else x.contiguous(), state)
            return default(x, hx, params_, *rest)

        return per_shape.expose(fn, (mode, num_layers, bidirectional, batch_first,
                                     tuple(weights[1].shape)), ("B<=", "T<="))

    return factory


for _mode in ("lstm", "gru"):
    register_native(f"aten::{_mode}")(_native_factory(_mode))
    register_measured(f"aten::{_mode}")(_measured_factory(_mode))


_CELL_SCHEMAS = {"lstm": str(torch.ops.aten.lstm_cell.default._schema),
                 "gru": str(torch.ops.aten.gru_cell.default._schema)}
_CELL_ATEN = {"lstm": torch.lstm_cell, "gru": torch.gru_cell}


def _cell_weights(node: Node, mode: str) -> tuple | None:
    """``(w_ih, w_hh, b_ih, b_hh)`` of a cell node whose weights are constant float32 CPU
    tensors of one cell (the biases constant or None), else None."""
    if node.schema != _CELL_SCHEMAS[mode]:
        return None
    values = [constant_value(v) for v in node.inputs[2:6]]
    w_ih, w_hh, b_ih, b_hh = values
    if not all(isinstance(w, torch.Tensor) and w.dtype is torch.float32 and w.dim() == 2
               and w.device.type == "cpu" for w in (w_ih, w_hh)) \
            or not all(b is None or (isinstance(b, torch.Tensor) and b.dtype is torch.float32
                                     and b.device.type == "cpu") for b in (b_ih, b_hh)):
        return None
    g = (4 if mode == "lstm" else 3) * w_hh.shape[1]
    if w_ih.shape[0] != g or w_hh.shape[0] != g or 0 in w_ih.shape or any(
            b is not None and b.shape != (g,) for b in (b_ih, b_hh)):
        return None
    return w_ih, w_hh, b_ih, b_hh


def _cell_native_factory(mode: str):
    aten = _CELL_ATEN[mode]

    def factory(node: Node):
        """ATen's cell as the fallback would call it, a native for the measured choice."""
        if _cell_weights(node, mode) is None:
            return None

        @labelled(f"torch.{mode}_cell")
        def fn(*args):
            return aten(*args)

        return fn

    return factory


def _cell_measured_factory(mode: str):
    aten = _CELL_ATEN[mode]
    lstm = mode == "lstm"

    def factory(node: Node, chooser: KernelChooser, default: Callable[..., Any]
                ) -> Callable[..., Any] | None:
        found = _cell_weights(node, mode)
        if found is None or not ckernels.available():
            return None
        w_ih, w_hh, b_ih, b_hh = found
        input_size, hidden = w_ih.shape[1], w_hh.shape[1]
        per_shape = PerShape(chooser, ("aten", "native"))
        native: list[Cell | None] = [None]
        #: (x's shape, threads) → our cell's direct call, or None for ATen's
        calls: dict[tuple, Any] = {}
        f32, threads, tensor = torch.float32, torch.get_num_threads, torch.Tensor
        spec = f"{mode}_cell w_ih={tuple(w_ih.shape)} bias={b_ih is not None}"

        def native_cell() -> Cell:
            if native[0] is None:
                native[0] = Cell(mode, w_ih, w_hh, b_ih, b_hh)
            return native[0]

        def decide(x, hx, states, key):
            batch = x.shape[0]
            bucket = size_bucket(batch)
            bucket_key = (torch.Size((bucket, input_size)), key[1])
            name = per_shape.chosen.get(bucket_key)
            direct = None
            if name is None:
                direct = native_cell().direct(batch)

                def ours():
                    out = direct(x, *states)
                    return out[0] if lstm else out

                def theirs():
                    out = aten(x, hx, w_ih, w_hh, b_ih, b_hh)
                    return out[0] if lstm else out

                name = per_shape.choose(bucket_key, f"{spec} float32 B<={bucket}",
                                        lambda: {"aten": theirs, "native": ours})
            if name != "native":
                if "native" not in per_shape.chosen.values():
                    native[0] = None  # its packed weights serve no batch
                return ckernels.remember(calls, key, None)
            return ckernels.remember(calls, key, direct or native_cell().direct(batch))

        def fits(s, rows: int) -> bool:
            return isinstance(s, tensor) and s.dtype is f32 and s.is_cpu \
                and s.shape == (rows, hidden) and s.is_contiguous()

        # (A cell runs once a step of a decoding loop, on a few rows: its checks are written
        # out, not a generator over the states, ~1 µs of a ~5 µs call.)
        @labelled(f"{mode}_cell: kernel chosen per batch size by measurement")
        def fn(x, hx, w_ih_, w_hh_, b_ih_, b_hh_):
            if w_ih_ is w_ih and w_hh_ is w_hh and b_ih_ is b_ih and b_hh_ is b_hh \
                    and x.dtype is f32 and x.dim() == 2 and x.is_cpu and x.is_contiguous():
                shape = x.shape
                rows = shape[0]
                if rows > 0 and shape[1] == input_size:
                    if not lstm:
                        if fits(hx, rows):
                            key = (shape, threads())
                            call = calls[key] if key in calls else decide(x, hx, (hx,), key)
                            if call is not None:
                                return call(x, hx)
                    elif len(hx) == 2 and fits(hx[0], rows) and fits(hx[1], rows):
                        key = (shape, threads())
                        call = calls[key] if key in calls else decide(x, hx, tuple(hx), key)
                        if call is not None:
                            return call(x, hx[0], hx[1])
            return default(x, hx, w_ih_, w_hh_, b_ih_, b_hh_)

        return per_shape.expose(fn, (f"{mode}_cell", tuple(w_ih.shape), tuple(w_hh.shape)))

    return factory


for _mode in ("lstm", "gru"):
    register_native(f"aten::{_mode}_cell")(_cell_native_factory(_mode))
    register_measured(f"aten::{_mode}_cell")(_cell_measured_factory(_mode))
