"""Recurrent layers compiled by Inductor: ``static_runtime::lstm`` and ``static_runtime::gru``.

``passes/recurrent.py`` rewrites an ``aten::lstm.input`` / ``aten::gru.input`` node whose
weights are constant float32 tensors (and which runs in inference: ``train`` false) into
these kinds when ``StaticModuleOptions(fusion_compiler="inductor")``. They take the same
arguments and mean the same as ATen's operators.

Per input signature (the input's and initial state's shapes and strides, hence the sequence
length and batch) the whole recurrence is compiled once by Inductor (``ops/inductor.py``):
the input projections of all time steps as one GEMM per layer and direction, then every
step unrolled. At small batch the recurrent product ``h @ W_hh.T`` is written as a
broadcast multiply and a sum over the hidden size, one per gate, on ``W_hh`` transposed
once (vectors run along the gate's outputs, no horizontal sums), so that Inductor fuses a
step's products and its gate arithmetic into one vectorised loop nest — and all steps of a
direction into one C++ kernel, with no call back into Python or ATen between steps. At
larger batch the product stays a GEMM (one ``addmm`` per step) and the gates one fused
kernel. The wrapper that allocates the buffers and calls the kernels is Inductor's C++ one.
Every choice was measured (``benchmarks/recurrent.py --variants``; BENCHMARKS.md, "Issue
12: recurrent layers").

ATen's kernel runs instead when the call is not the one compiled for: another dtype than
float32, a tensor not on the CPU (the planning run's meta tensors), an input that is not 3-D
or whose sizes do not fit the weights (ATen then raises its usual error), a sequence so
long that unrolling it would compile too slowly (``MAX_UNROLLED_STEPS``), an LSTM at a
batch where ATen's oneDNN kernel is as fast (``LSTM_MAX_BATCH``), or a signature Inductor
refused — which is warned about once per signature, naming the node.
"""

from __future__ import annotations

import threading
import warnings
from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import Any

import torch

from static_runtime.ir.graph import Node
from static_runtime.ir.own_ops import GRU, LSTM
from static_runtime.ops.registry import implement_torch_ops, labelled, register_native
from static_runtime.passes.recurrent import GATES, constant_weights, weights_fit

#: At most this many time steps × layers × directions are unrolled into one compiled graph;
#: longer sequences run ATen's kernel. Inductor's compile time grows with the unrolled
#: graph: a cold compile of 2 layers × 20 steps took 30-85 s on the busy 2-core machine
#: (BENCHMARKS.md, "Issue 12: recurrent layers"); a warm one (on-disk cache) ~1-6 s.
MAX_UNROLLED_STEPS = 64
#: Up to this batch the recurrent product is a fused multiply-sum, above it a GEMM. At batch
#: 8 the multiply-sum was still the faster (bidirectional GRU 32 → 48: 0.28 × ATen's time
#: against 0.34 × as a GEMM).
MATVEC_MAX_BATCH = 8
#: How the multiply-sum reads ``W_hh`` ("rows" or "columns", see ``PRODUCTS``): "columns"
#: measured faster at batch 1 (LSTM 0.57 against 0.54-0.63 ×, GRU 0.13 against 0.15 ×).
MATVEC_PRODUCT = "columns"
#: Compile with Inductor's C++ wrapper (buffers and kernel calls in C++, not Python): an
#: unrolled recurrence allocates a few buffers per step, which the Python wrapper pays
#: ~1 µs each for (GRU at batch 1: 0.13 × ATen's time against 0.23 ×).
CPP_WRAPPER = True
#: Above this batch an LSTM keeps ATen's kernel, which is oneDNN's RNN primitive on the CPU
#: (at batch 8 the compiled recurrence took 1.05-1.18 × its time); ATen's GRU has no such
#: kernel and is compiled at every batch.
LSTM_MAX_BATCH = 4
#: Compiled signatures kept per node (the first compiled dropped first).
MAX_SIGNATURES = 8


def prepare_weights(weights: Sequence[torch.Tensor], has_biases: bool,
                    product: str) -> list[torch.Tensor]:
    """The weights as ``recurrence(..., product)`` takes them."""
    if product != "columns":
        return list(weights)
    per = 4 if has_biases else 2
    return [w.t().contiguous() if i % per == 1 else w for i, w in enumerate(weights)]


def _product_rows(h: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """``h @ w.T`` for ``w`` of shape (N, K), as a multiply and a sum over K, which Inductor
    fuses with what follows (a horizontal sum of vectors per output)."""
    return (h.unsqueeze(1) * w.unsqueeze(0)).sum(-1)


def _product_columns(h: torch.Tensor, w_t: torch.Tensor) -> torch.Tensor:
    """``h @ w_t`` for ``w_t`` of shape (K, N), as a multiply and a sum over K: vectors run
    along N, so no horizontal sums."""
    return (h.unsqueeze(-1) * w_t.unsqueeze(0)).sum(1)


#: How a step's recurrent product ``h @ W_hh.T`` is written: "rows" and "columns" as a
#: fused multiply-sum (``W_hh`` as is, or passed transposed), "gemm" as ``addmm``.
PRODUCTS = ("rows", "columns", "gemm")


def recurrence(mode: str, num_layers: int, bidirectional: bool, has_biases: bool,
               batch_first: bool, steps: int, product: str) -> Callable[..., tuple]:
    """The unrolled computation, as a function of ``(input, *state, *weights)`` (``state``:
    ``h0`` and, for an LSTM, ``c0``) returning ATen's outputs; for tracing and compiling.
    With ``product="columns"`` every ``W_hh`` is expected transposed (``prepare_weights``)."""
    dirs = 2 if bidirectional else 1
    per = 4 if has_biases else 2
    gates = GATES[mode]
    n_state = 2 if mode == "lstm" else 1
    time_dim = 1 if batch_first else 0

    def recurrent_product(h, w_hh, b_hh):
        if product == "gemm":
            prod = torch.mm(h, w_hh.t()) if b_hh is None else torch.addmm(b_hh, h, w_hh.t())
            return list(prod.chunk(gates, 1))
        if product == "rows":
            parts = [_product_rows(h, w) for w in w_hh.chunk(gates, 0)]
        else:
            parts = [_product_columns(h, w) for w in w_hh.chunk(gates, 1)]
        if b_hh is not None:
            parts = [p + b for p, b in zip(parts, b_hh.chunk(gates, 0))]
        return parts

    def fn(x, *rest):
        state, weights = rest[:n_state], rest[n_state:]
        layer_input = x
        h_last, c_last = [], []
        for layer in range(num_layers):
            outputs = []
            for d in range(dirs):
                k = layer * dirs + d
                w_ih, w_hh, *biases = weights[k * per:(k + 1) * per]
                b_ih, b_hh = biases if biases else (None, None)
                projected = torch.matmul(layer_input, w_ih.t())
                if b_ih is not None:
                    # LSTM adds both biases before its nonlinearities; GRU keeps b_hh inside
                    # the reset gate's product.
                    projected = projected + (b_ih + b_hh if mode == "lstm" else b_ih)
                    if mode == "lstm":
                        b_hh = None
                h = state[0][k]
                c = state[1][k] if mode == "lstm" else None
                out: list[Any] = [None] * steps
                for t in (range(steps) if d == 0 else range(steps - 1, -1, -1)):
                    xs = projected.select(time_dim, t).chunk(gates, 1)
                    hs = recurrent_product(h, w_hh, b_hh)
                    if mode == "lstm":
                        i, f = torch.sigmoid(xs[0] + hs[0]), torch.sigmoid(xs[1] + hs[1])
                        g, o = torch.tanh(xs[2] + hs[2]), torch.sigmoid(xs[3] + hs[3])
                        c = f * c + i * g
                        h = o * torch.tanh(c)
                    else:
                        r, z = torch.sigmoid(xs[0] + hs[0]), torch.sigmoid(xs[1] + hs[1])
                        n = torch.tanh(xs[2] + r * hs[2])
                        h = n + z * (h - n)
                    out[t] = h
                outputs.append(torch.stack(out, time_dim))
                h_last.append(h)
                c_last.append(c)
            layer_input = outputs[0] if dirs == 1 else torch.cat(outputs, -1)
        if mode == "lstm":
            return layer_input, torch.stack(h_last), torch.stack(c_last)
        return layer_input, torch.stack(h_last)

    return fn


class CompiledRecurrence:
    """One node's compiled recurrences, one per input signature; ATen otherwise."""

    def __init__(self, node: Node, mode: str, weights: list[torch.Tensor],
                 params_value: Any, has_biases: bool, num_layers: int,
                 bidirectional: bool, batch_first: bool):
        self.node_name = f"{node.kind}" + (f" at {node.source}" if node.source else "")
        self.mode = mode
        self.weights = weights
        self.params_value = params_value
        self.has_biases = has_biases
        self.num_layers = num_layers
        self.bidirectional = bidirectional
        self.batch_first = batch_first
        self.dirs = 2 if bidirectional else 1
        self.hidden = weights[1].shape[1]
        self.input_size = weights[0].shape[1]
        self.aten = torch.lstm if mode == "lstm" else torch.gru
        #: signature → ``run(x, state)``, or None where Inductor refused (ATen runs)
        self.compiled: OrderedDict[tuple, Callable[..., Any] | None] = OrderedDict()
        self.compile_seconds: dict[tuple, float] = {}
        self._lock = threading.Lock()

    def _state(self, hx: Any) -> list[torch.Tensor] | None:
        state = list(hx) if self.mode == "lstm" else [hx]
        if self.mode == "lstm" and len(state) != 2:
            return None
        return state

    def signature(self, x: Any, state: list[Any]) -> tuple | None:
        """The signature a compiled graph is specialised to, or None: ATen runs this call."""
        if not (isinstance(x, torch.Tensor) and x.dtype is torch.float32 and x.dim() == 3
                and x.device.type == "cpu" and x.layout == torch.strided
                and x.shape[2] == self.input_size and not x.requires_grad):
            return None
        batch = x.shape[0] if self.batch_first else x.shape[1]
        steps = x.shape[1] if self.batch_first else x.shape[0]
        expected = (self.num_layers * self.dirs, batch, self.hidden)
        for s in state:
            if not (isinstance(s, torch.Tensor) and s.dtype is torch.float32
                    and s.device.type == "cpu" and s.layout == torch.strided
                    and tuple(s.shape) == expected and not s.requires_grad):
                return None
        if steps == 0 or batch == 0 or steps * self.num_layers * self.dirs > MAX_UNROLLED_STEPS:
            return None
        if self.mode == "lstm" and batch > LSTM_MAX_BATCH:
            return None
        # Inductor's kernels keep the OpenMP thread count they were compiled with
        return (torch.get_num_threads(), tuple(x.shape), x.stride(),
                *((tuple(s.shape), s.stride()) for s in state))

    def _compile(self, key: tuple, x: torch.Tensor, state: list[torch.Tensor]):
        from static_runtime.ops.inductor import CompileRefused, compile_graph

        batch = x.shape[0] if self.batch_first else x.shape[1]
        steps = x.shape[1] if self.batch_first else x.shape[0]
        product = MATVEC_PRODUCT if batch <= MATVEC_MAX_BATCH else "gemm"
        fn = recurrence(self.mode, self.num_layers, self.bidirectional, self.has_biases,
                        self.batch_first, steps, product)
        weights = prepare_weights(self.weights, self.has_biases, product)
        try:
            compiled = compile_graph(fn, [x, *state, *weights], cpp_wrapper=CPP_WRAPPER)
        except CompileRefused as e:
            warnings.warn(f"{self.node_name}: Inductor did not compile the recurrence for "
                          f"input {tuple(x.shape)} ({e}); ATen's kernel runs it",
                          RuntimeWarning, stacklevel=3)
            return None
        self.compile_seconds[key] = compiled.seconds
        call = compiled.call

        def run(x, state):
            return call([x, *state, *weights])

        return run

    def __call__(self, x, hx, params, has_biases, num_layers, dropout, train, bidirectional,
                 batch_first):
        state = self._state(hx) if params is self.params_value else None
        key = self.signature(x, state) if state is not None else None
        if key is None:
            return self.aten(x, hx, params, has_biases, num_layers, dropout, train,
                             bidirectional, batch_first)
        call = self.compiled.get(key, False)
        if call is False:
            with self._lock:
                call = self.compiled.get(key, False)
                if call is False:
                    call = self._compile(key, x, state)
                    self.compiled[key] = call
                    while len(self.compiled) > MAX_SIGNATURES:
                        self.compiled.popitem(last=False)
        if call is None:
            return self.aten(x, hx, params, has_biases, num_layers, dropout, train,
                             bidirectional, batch_first)
        return call(x, state)


def plain_layer(node: Node, schema: str, mode: str) -> tuple | None:
    """``(params, weights, has_biases, num_layers, bidirectional, batch_first)`` of an LSTM or
    GRU node of ``schema`` (ATen's or ours) whose weights are constants of a plain ``mode``
    layer (no projection) run in inference, else None."""
    if node.schema != schema:
        return None
    from static_runtime.ops.selection import constant_value

    params = constant_value(node.inputs[2])
    weights = constant_weights(params)
    flags = [constant_value(v) for v in node.inputs[3:]]
    if weights is None or any(f is NotImplemented for f in flags):
        return None
    has_biases, num_layers, _dropout, train, bidirectional, batch_first = flags
    if train or weights_fit(mode, weights, has_biases, num_layers, bidirectional):
        return None
    return params, weights, has_biases, num_layers, bidirectional, batch_first


def _native(mode: str, schema: str):
    def factory(node: Node):
        found = plain_layer(node, schema, mode)
        if found is None:
            return None
        params_value, weights, has_biases, num_layers, bidirectional, batch_first = found
        impl = CompiledRecurrence(node, mode, weights, params_value, has_biases, num_layers,
                                  bidirectional, batch_first)
        return labelled(f"Inductor-compiled {mode} per input signature (ATen otherwise)")(impl)

    return factory


register_native("static_runtime::lstm")(_native("lstm", LSTM))
register_native("static_runtime::gru")(_native("gru", GRU))


implement_torch_ops(((LSTM, torch.lstm), (GRU, torch.gru)))
