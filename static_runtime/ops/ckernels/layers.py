"""Whole layers by our own kernels (``recurrent.c``, ``norms.c``, ``gemm.c``): an LSTM/GRU
forward, one LSTM/GRU cell step, RMS and L2 normalisation, a SwiGLU MLP's gated projections,
built on the GEMM and argument blocks of ``ckernels``."""

from __future__ import annotations

import torch

from static_runtime.ops.ckernels import Gemm, _block, _required_library, remember


class Recurrent:
    """An ``nn.LSTM`` / ``nn.GRU`` forward (``torch.lstm`` / ``torch.gru`` with these flat
    weights, in inference) by our own kernels: per layer and direction, the input projections
    of all time steps as one GEMM, then the steps in C (``recurrent.c``). Plain layers only
    (no LSTM projection); any number of layers, either direction, ``batch_first`` or not."""

    def __init__(self, mode: str, weights: list[torch.Tensor], has_biases: bool,
                 num_layers: int, bidirectional: bool, batch_first: bool):
        lib = _required_library()
        if mode not in ("lstm", "gru"):
            raise ValueError(f"Recurrent runs 'lstm' or 'gru', not {mode!r}")
        self.mode, self.num_layers, self.batch_first = mode, num_layers, batch_first
        self.dirs = 2 if bidirectional else 1
        gates = 4 if mode == "lstm" else 3
        per = 4 if has_biases else 2
        self.hidden = weights[1].shape[1]
        self.input_size = weights[0].shape[1]
        #: per (layer, direction): the input projection, and the recurrent product (whose
        #: packed W_hh and padded b_hh the step loop reads)
        self.layers: list[tuple[Gemm, Gemm]] = []
        for i in range(num_layers * self.dirs):
            w_ih, w_hh = weights[i * per], weights[i * per + 1]
            b_ih = weights[i * per + 2] if has_biases else None
            b_hh = weights[i * per + 3] if has_biases else None
            g = gates * self.hidden
            if w_ih.shape[0] != g or w_hh.shape != (g, self.hidden):
                raise ValueError(f"Recurrent: {mode} weights of layer {i // self.dirs} do not "
                                 f"fit a hidden size of {self.hidden}")
            self.layers.append((Gemm(w_ih.detach().t(), b_ih), Gemm(w_hh.detach().t(), b_hh)))
        self._projections = [layer[0].kernel() for layer in self.layers]
        self._run = lib.sr_recurrent_layer

    def __call__(self, x: torch.Tensor, h0: torch.Tensor, c0: torch.Tensor | None = None):
        """``(output, h_n)`` (GRU) or ``(output, h_n, c_n)`` (LSTM) as ATen gives them, for a
        contiguous float32 CPU (T, B, input) input (``(B, T, input)`` if ``batch_first``)
        and (layers · directions, B, hidden) initial states."""
        lstm = self.mode == "lstm"
        if x.dtype is not torch.float32 or x.dim() != 3 or not x.is_cpu \
                or x.shape[2] != self.input_size or not x.is_contiguous():
            raise ValueError(f"Recurrent takes a contiguous float32 CPU (T, B, "
                             f"{self.input_size}) input, got {x.dtype} {tuple(x.shape)}")
        steps, batch = (x.shape[1], x.shape[0]) if self.batch_first else x.shape[:2]
        hidden, dirs = self.hidden, self.dirs
        state_shape = (self.num_layers * dirs, batch, hidden)
        for name, st in (("h0", h0), ("c0", c0 if lstm else h0)):
            if st is None or st.shape != state_shape or st.dtype is not torch.float32:
                raise ValueError(f"Recurrent: {name} must be float32 {state_shape}, got "
                                 f"{None if st is None else (st.dtype, tuple(st.shape))}")
        h_n = h0.contiguous().clone()  # updated in place, layer by layer
        c_n = c0.contiguous().clone() if lstm else None
        layer_input = x
        out = x
        for layer in range(self.num_layers):
            width = dirs * hidden
            out = torch.empty((*x.shape[:2], width))
            rows = layer_input.reshape(steps * batch, -1)
            for d in range(dirs):
                i = layer * dirs + d
                recurrent = self.layers[i][1]
                proj = self._projections[i](rows, None)  # (T·B, G·H): rows in x's order
                g = proj.shape[1]
                if self.batch_first:  # row (b, t)
                    xs_t, xs_b, os_t, os_b = g, steps * g, width, steps * width
                else:  # row (t, b)
                    xs_t, xs_b, os_t, os_b = batch * g, g, batch * width, width
                bias = recurrent.bias
                status = self._run(
                    proj.data_ptr(), xs_t, xs_b, recurrent.packed.data_ptr(),
                    None if bias is None else bias.data_ptr(), h_n[i].data_ptr(),
                    None if c_n is None else c_n[i].data_ptr(),
                    out.data_ptr() + d * hidden * out.element_size(),
                    os_t, os_b, steps, batch, hidden, d)
                if status:
                    raise MemoryError("Recurrent: no memory for a step's products")
            layer_input = out
        return (out, h_n, c_n) if lstm else (out, h_n)


class Cell:
    """``torch.gru_cell`` / ``torch.lstm_cell`` in inference by our own kernel (``sr_rnn_cell``):
    the input and the recurrent product on weights packed once, then the gates, in one call
    (ATen's cell makes two GEMMs, a split and a handful of element-wise operators)."""

    def __init__(self, mode: str, w_ih: torch.Tensor, w_hh: torch.Tensor,
                 b_ih: torch.Tensor | None, b_hh: torch.Tensor | None):
        lib = _required_library()
        if mode not in ("lstm", "gru"):
            raise ValueError(f"Cell runs 'lstm' or 'gru', not {mode!r}")
        self.lstm = mode == "lstm"
        self.input_size, self.hidden = w_ih.shape[-1], w_hh.shape[-1]
        g = (4 if self.lstm else 3) * self.hidden
        if w_ih.shape != (g, self.input_size) or w_hh.shape != (g, self.hidden) or any(
                b is not None and b.shape != (g,) for b in (b_ih, b_hh)):
            raise ValueError(f"Cell: {mode} cell weights {tuple(w_ih.shape)}, "
                             f"{tuple(w_hh.shape)} do not fit a hidden size of {self.hidden}")
        self.ih, self.hh = Gemm(w_ih.detach().t(), b_ih), Gemm(w_hh.detach().t(), b_hh)
        self._run = lib.sr_rnn_cell
        self._blocks: dict[int, tuple] = {}

    def direct(self, batch: int):
        """``(x, h) -> h'`` (GRU) or ``(x, h, c) -> (h', c')`` (LSTM) for ``batch`` rows,
        checking nothing: the caller has checked that ``x`` is a contiguous float32 CPU
        (batch, input) tensor and each state a contiguous float32 CPU (batch, hidden) one."""
        found = self._blocks.get(batch)
        if found is None:
            ih, hh = self.ih, self.hh
            found = remember(self._blocks, batch, _block(
                batch, self.input_size, self.hidden, ih.packed.data_ptr(),
                0 if ih.bias is None else ih.bias.data_ptr(), hh.packed.data_ptr(),
                0 if hh.bias is None else hh.bias.data_ptr()))
        block, address = found
        run, empty, hidden = self._run, torch.empty, self.hidden

        def failed():
            return MemoryError(f"Cell: no memory for the gates of {batch} rows")

        if self.lstm:
            def cell(x: torch.Tensor, h: torch.Tensor, c: torch.Tensor):
                hn, cn = empty(batch, hidden), empty(batch, hidden)
                if run(x.data_ptr(), h.data_ptr(), c.data_ptr(), hn.data_ptr(), cn.data_ptr(),
                       address):
                    raise failed()
                return hn, cn
        else:
            def cell(x: torch.Tensor, h: torch.Tensor):
                hn = empty(batch, hidden)
                if run(x.data_ptr(), h.data_ptr(), None, hn.data_ptr(), None, address):
                    raise failed()
                return hn

        cell.keep = (self, block)  # type: ignore[attr-defined]  # what the addresses name
        return cell


def rms_norm(weight: torch.Tensor, eps: float):
    """A kernel ``x -> weight * (x * rsqrt(x.pow(2).mean(-1, keepdim=True) + eps))`` for
    contiguous float32 CPU ``x`` whose last dimension is ``weight``'s length (``norms.c``)."""
    lib = _required_library()
    if weight.dim() != 1 or weight.dtype is not torch.float32:
        raise ValueError(f"rms_norm takes a float32 1-D weight, got {weight.dtype} "
                         f"{tuple(weight.shape)}")
    weight = weight.detach().contiguous()
    h, w_ptr, run, f32 = weight.shape[0], weight.data_ptr(), lib.sr_rms_norm, torch.float32
    eps = float(eps)

    def norm(x: torch.Tensor) -> torch.Tensor:
        if x.dtype is not f32 or not x.is_cpu or x.dim() < 1 or x.shape[-1] != h \
                or not x.is_contiguous():
            raise ValueError(f"rms_norm takes a contiguous float32 CPU tensor of last "
                             f"dimension {h}, got {x.dtype} {tuple(x.shape)}")
        out = torch.empty_like(x)
        run(x.data_ptr(), w_ptr, out.data_ptr(), x.numel() // h if h else 0, h, eps)
        return out

    def direct_for(shape: torch.Size):
        """``x -> result`` for contiguous float32 CPU inputs of ``shape``, unchecked."""
        # (``empty(*dims)``: a ``torch.Size`` argument costs 1.36 µs against 0.60)
        # (bound by defaults: a closure's cells are objects the collector tracks, per size)
        rows = shape.numel() // h if h else 0

        def direct(x: torch.Tensor, empty=torch.empty, dims=tuple(shape), rows=rows
                   ) -> torch.Tensor:
            out = empty(*dims)
            run(x.data_ptr(), w_ptr, out.data_ptr(), rows, h, eps)
            return out

        def into(x: torch.Tensor, out: torch.Tensor, rows=rows) -> None:
            run(x.data_ptr(), w_ptr, out.data_ptr(), rows, h, eps)

        direct.into = into  # type: ignore[attr-defined]  (into a contiguous out of x's shape)
        return direct

    norm.keep = weight  # type: ignore[attr-defined]
    norm.direct_for = direct_for  # type: ignore[attr-defined]
    return norm


def layer_norm(h: int, weight: torch.Tensor | None, bias: torch.Tensor | None, eps: float):
    """A kernel ``x -> layer_norm(x, [h], weight, bias, eps)`` for contiguous float32 CPU ``x``
    whose last dimension is ``h`` (``norms.c``); ``direct_for(shape)`` its unchecked call."""
    lib = _required_library()
    for name, t in (("weight", weight), ("bias", bias)):
        if t is not None and (t.shape != (h,) or t.dtype is not torch.float32):
            raise ValueError(f"layer_norm: the {name} must be float32 ({h},), got {t.dtype} "
                             f"{tuple(t.shape)}")
    keep = tuple(t.detach().contiguous() if t is not None else None for t in (weight, bias))
    w_ptr, b_ptr = (t.data_ptr() if t is not None else None for t in keep)
    run, eps = lib.sr_layer_norm, float(eps)

    def direct_for(shape: torch.Size):
        """``x -> result`` for contiguous float32 CPU inputs of ``shape``, unchecked."""
        # (``empty(*dims)``: a ``torch.Size`` argument costs 1.36 µs against 0.60)
        # (bound by defaults: a closure's cells are objects the collector tracks, per size;
        # ``_owners``: what the pointers name)
        rows = shape.numel() // h if h else 0

        def direct(x: torch.Tensor, empty=torch.empty, dims=tuple(shape), rows=rows,
                   _owners=keep) -> torch.Tensor:
            out = empty(*dims)
            run(x.data_ptr(), w_ptr, b_ptr, out.data_ptr(), rows, h, eps)
            return out

        def into(x: torch.Tensor, out: torch.Tensor, rows=rows, _owners=keep) -> None:
            run(x.data_ptr(), w_ptr, b_ptr, out.data_ptr(), rows, h, eps)

        direct.into = into  # type: ignore[attr-defined]  (into a contiguous out of x's shape)
        return direct

    return direct_for


def l2_normalize(h: int, eps: float):
    """A kernel ``x -> x / clamp_min(x.norm(2, -1, keepdim=True), eps)`` for contiguous
    float32 CPU ``x`` whose last dimension is ``h`` (``norms.c``)."""
    lib = _required_library()
    run, f32, eps = lib.sr_l2_normalize, torch.float32, float(eps)

    def normalize(x: torch.Tensor) -> torch.Tensor:
        if x.dtype is not f32 or not x.is_cpu or x.dim() < 1 or x.shape[-1] != h \
                or not x.is_contiguous():
            raise ValueError(f"l2_normalize takes a contiguous float32 CPU tensor of last "
                             f"dimension {h}, got {x.dtype} {tuple(x.shape)}")
        out = torch.empty_like(x)
        run(x.data_ptr(), out.data_ptr(), x.numel() // h if h else 0, h, eps)
        return out

    def direct_for(shape: torch.Size):
        """``x -> result`` for contiguous float32 CPU inputs of ``shape``, unchecked."""
        # (``empty(*dims)``: a ``torch.Size`` argument costs 1.36 µs against 0.60)
        # (bound by defaults: a closure's cells are objects the collector tracks, per size)
        rows = shape.numel() // h if h else 0

        def direct(x: torch.Tensor, empty=torch.empty, dims=tuple(shape), rows=rows
                   ) -> torch.Tensor:
            out = empty(*dims)
            run(x.data_ptr(), out.data_ptr(), rows, h, eps)
            return out

        def into(x: torch.Tensor, out: torch.Tensor, rows=rows) -> None:
            run(x.data_ptr(), out.data_ptr(), rows, h, eps)

        direct.into = into  # type: ignore[attr-defined]  (into a contiguous out of x's shape)
        return direct

    normalize.direct_for = direct_for  # type: ignore[attr-defined]
    return normalize


class GatedGemm:
    """``silu(x · w_gateᵀ + b_gate) * (x · w_upᵀ + b_up)`` for constant (H, K) float32 weights
    (a SwiGLU MLP's gate and up projections) by one product (``gemm.c``, ``sr_gemm_gated``):
    the two weights packed as one, their columns interleaved in blocks of 16, the gated
    product made in the epilogue."""

    def __init__(self, w_gate: torch.Tensor, b_gate: torch.Tensor | None, w_up: torch.Tensor,
                 b_up: torch.Tensor | None):
        lib = _required_library()
        if w_gate.dim() != 2 or w_gate.shape != w_up.shape \
                or {w_gate.dtype, w_up.dtype} != {torch.float32}:
            raise ValueError(f"GatedGemm takes two float32 (H, K) weights of one shape, got "
                             f"{w_gate.dtype} {tuple(w_gate.shape)} and {w_up.dtype} "
                             f"{tuple(w_up.shape)}")
        self.h, self.k = w_gate.shape
        blocks = (self.h + 15) // 16

        def interleaved(gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
            """(blocks · 32, ...): block q's 16 rows of ``gate`` (zero past H), then ``up``'s."""
            rest = gate.shape[1:]
            padded = [torch.zeros(blocks * 16, *rest) for _ in range(2)]
            padded[0][:self.h], padded[1][:self.h] = gate.detach(), up.detach()
            return torch.stack([t.view(blocks, 16, *rest) for t in padded], 1) \
                .reshape(blocks * 32, *rest)

        bias = None
        if b_gate is not None or b_up is not None:
            zeros = torch.zeros(self.h)
            bias = interleaved(zeros if b_gate is None else b_gate.float(),
                               zeros if b_up is None else b_up.float())
        self.gemm = Gemm(interleaved(w_gate, w_up).t(), bias)
        self._run = lib.sr_gemm_gated_block
        #: rows → the call's argument block
        self._blocks: dict[int, tuple] = {}

    def direct(self, m: int):
        """``(x, o) -> None`` for ``m`` rows, checking nothing: ``x`` a contiguous float32 CPU
        tensor of ``m`` rows of K (any rank), ``o`` one of ``m`` rows of H."""
        run, gemm = self._run, self.gemm
        block = self._blocks.get(m)
        if block is None:
            block = remember(self._blocks, m, _block(
                max(self.k, 1), gemm.packed.data_ptr(),
                0 if gemm.bias is None else gemm.bias.data_ptr(), self.h, m, self.k, self.h))
        def direct(x: torch.Tensor, o: torch.Tensor, run=run, address=block[1],
                   _owners=(self, block)) -> None:
            if run(x.data_ptr(), o.data_ptr(), address):
                raise MemoryError(f"GatedGemm: no memory for the partial sums of {o.shape[0]} "
                                  "rows")

        return direct
