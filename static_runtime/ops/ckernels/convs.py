"""Convolutions by our own kernels (``depthwise.c``, ``gemm.c``): a depthwise loop, an
implicit GEMM, and the unchecked per-shape calls both give (a 1 × 1 convolution is a
``Gemm``'s ``conv1x1``), built on the argument blocks of ``ckernels``."""

from __future__ import annotations

import torch

from static_runtime.ops.ckernels import ACTIVATIONS, Gemm, _block, _required_library, remember


def output_size(h: int, w: int, kh: int, kw: int, stride, padding, dilation
                 ) -> tuple[int, int]:
    """A convolution's output height and width (PyTorch's formula)."""
    (sh, sw), (ph, pw), (dh, dw) = stride, padding, dilation
    return (h + 2 * ph - dh * (kh - 1) - 1) // sh + 1, (w + 2 * pw - dw * (kw - 1) - 1) // sw + 1


#: The activations the kernels apply themselves, by the fused operators' attr.


def depthwise_weight(weight: torch.Tensor) -> torch.Tensor:
    """A depthwise convolution's (C, 1, KH, KW) weight as the kernel reads it: (KH, KW, C)."""
    if weight.dim() != 4 or weight.shape[1] != 1 or weight.dtype is not torch.float32:
        raise ValueError(f"a depthwise weight is float32 (C, 1, KH, KW), got {weight.dtype} "
                         f"{tuple(weight.shape)}")
    return weight.detach().reshape(weight.shape[0], *weight.shape[2:]).permute(1, 2, 0) \
        .contiguous()


def depthwise_conv2d(weight: torch.Tensor, bias: torch.Tensor | None, stride: list[int],
                     padding: list[int], dilation: list[int], act: str):
    """A kernel ``x -> conv2d(x, weight, bias, stride, padding, dilation, groups=C)`` then
    the activation ``act`` (a key of ``ACTIVATIONS``), for float32 CPU inputs of
    the weight's C channels; the result is channels-last (a channels-first input is
    converted first). The weight and bias are copied into the kernel's layout now."""
    lib = _required_library()
    if act not in ACTIVATIONS:
        raise ValueError(f"depthwise_conv2d applies {sorted(ACTIVATIONS)}, not "
                         f"{act!r}")
    packed = depthwise_weight(weight)
    kh, kw, c = packed.shape
    if bias is not None:
        if bias.shape != (c,) or bias.dtype is not torch.float32:
            raise ValueError(f"depthwise_conv2d: the bias must be float32 ({c},), got "
                             f"{bias.dtype} {tuple(bias.shape)}")
        bias = bias.detach().contiguous()
    code = ACTIVATIONS[act]
    run = lib.sr_depthwise_conv2d_block
    w_ptr, b_ptr = packed.data_ptr(), 0 if bias is None else bias.data_ptr()
    cl, f32, empty_strided = torch.channels_last, torch.float32, torch.empty_strided
    shapes: dict[torch.Size, tuple] = {}

    def sizes(shape: torch.Size) -> tuple:
        n, channels, h, w = shape
        oh, ow = output_size(h, w, kh, kw, stride, padding, dilation)
        if channels != c or oh < 1 or ow < 1:
            raise ValueError(f"depthwise_conv2d of {c} channels, a {kh} × {kw} kernel "
                             f"(padding {list(padding)}, dilation {list(dilation)}) cannot "
                             f"take an input of shape {tuple(shape)}")
        block = _block(w_ptr, b_ptr, n, h, w, c, kh, kw, *stride, *padding, *dilation, oh, ow,
                       code)
        return remember(shapes, shape, ((n, c, oh, ow), channels_last_strides(c, oh, ow),
                                         block[1], block))

    def depthwise(x: torch.Tensor) -> torch.Tensor:
        if x.dtype is not f32 or not x.is_cpu or x.dim() != 4:
            raise ValueError(f"depthwise_conv2d takes a float32 4-D CPU tensor, got "
                             f"{x.dtype} {tuple(x.shape)} on {x.device}")
        x = x.contiguous(memory_format=cl)
        shape, strides, block, _ = shapes.get(x.shape) or sizes(x.shape)
        out = empty_strided(shape, strides)
        run(x.data_ptr(), out.data_ptr(), block)
        return out

    def direct_for(shape: torch.Size):
        """``x -> result`` for channels-last float32 CPU inputs of ``shape``, unchecked."""
        out_shape, strides, address, block = shapes.get(shape) or sizes(shape)
        return unchecked(run, out_shape, strides, address, (packed, bias, block))

    depthwise.keep = (packed, bias)  # type: ignore[attr-defined]  # the pointers' owners
    depthwise.direct_for = direct_for  # type: ignore[attr-defined]
    return depthwise


class Conv2d:
    """``act(conv2d(x, weight, bias, stride, padding, dilation))`` of one group by our own
    kernel (``gemm.c``: an implicit GEMM over output pixels on a zero-padded channels-last
    copy of the input) for a constant (Cout, Cin, KH, KW) ``weight``, packed once. It reads
    channels-last and contiguous (channels-first) inputs as they are."""

    def __init__(self, weight: torch.Tensor, bias: torch.Tensor | None, stride: list[int],
                 padding: list[int], dilation: list[int], act: str = "none"):
        lib = _required_library()
        if weight.dim() != 4 or weight.dtype is not torch.float32:
            raise ValueError(f"Conv2d takes a float32 (Cout, Cin, KH, KW) weight, got "
                             f"{weight.dtype} {tuple(weight.shape)}")
        self.cout, self.cin, self.kh, self.kw = weight.shape
        self.weight, self.bias, self.act = weight.detach(), bias, act
        self.stride, self.padding, self.dilation = list(stride), list(padding), list(dilation)
        self._run, self._run_residual = lib.sr_conv2d_block, lib.sr_conv2d_res_block
        #: channels-first → the implicit GEMM's (KH·KW·Cin, Cout) matrix, packed by the GEMM's
        #: packing, in the order the input holds a pixel's taps: (i, j, ci) channels-last,
        #: (i, ci, j) channels-first (made when an input of that layout first comes)
        self._gemms: dict[bool, Gemm] = {}
        #: (input shape, channels-first) → (out shape, out strides, block address, block)
        self._shapes: dict[tuple[torch.Size, bool], tuple] = {}

    def _gemm(self, channels_first: bool) -> Gemm:
        gemm = self._gemms.get(channels_first)
        if gemm is None:
            order = (2, 1, 3, 0) if channels_first else (2, 3, 1, 0)
            matrix = self.weight.permute(*order).reshape(-1, self.cout)
            gemm = self._gemms[channels_first] = Gemm(matrix, self.bias, self.act)
        return gemm

    def _sizes(self, shape: torch.Size, channels_first: bool) -> tuple:
        n, channels, h, w = shape
        kh, kw, cout = self.kh, self.kw, self.cout
        oh, ow = output_size(h, w, kh, kw, self.stride, self.padding, self.dilation)
        if channels != self.cin or oh < 1 or ow < 1:
            raise ValueError(f"a convolution of {self.cin} input channels and a {kh} × {kw} "
                             f"kernel (padding {self.padding}, dilation {self.dilation}) cannot "
                             f"take an input of shape {tuple(shape)}")
        gemm = self._gemm(channels_first)
        block = _block(gemm.packed.data_ptr(), 0 if gemm.bias is None else gemm.bias.data_ptr(),
                       n, h, w, channels, kh, kw, *self.stride, *self.padding, *self.dilation,
                       oh, ow, cout, gemm.act, int(channels_first))
        return remember(self._shapes, (shape, channels_first),
                        ((n, cout, oh, ow), channels_last_strides(cout, oh, ow), block[1],
                         block))

    def kernel(self):
        """``x -> result``, channels-last; ``x`` channels-last or contiguous is read as it is
        (any other layout is made contiguous first)."""
        run, shapes, sizes = self._run, self._shapes, self._sizes
        f32, cl, empty_strided = torch.float32, torch.channels_last, torch.empty_strided

        def conv2d(x: torch.Tensor) -> torch.Tensor:
            if x.dtype is not f32 or x.dim() != 4 or not x.is_cpu:
                raise ValueError(f"Conv2d takes a float32 4-D CPU tensor, got {x.dtype} "
                                 f"{tuple(x.shape)} on {x.device}")
            channels_first = not x.is_contiguous(memory_format=cl)
            if channels_first:
                x = x.contiguous()
            key = (x.shape, channels_first)
            shape, strides, block, _ = shapes.get(key) or sizes(*key)
            out = empty_strided(shape, strides)
            if run(x.data_ptr(), out.data_ptr(), block):
                raise MemoryError(f"Conv2d: no memory for the padded input of {tuple(x.shape)}")
            return out

        def direct_for(shape: torch.Size, channels_first: bool = False):
            """``x -> result`` for float32 CPU inputs of ``shape``, channels-last (or
            contiguous, with ``channels_first``), unchecked."""
            out_shape, strides, address, block = (shapes.get((shape, channels_first))
                                                  or sizes(shape, channels_first))
            return unchecked(run, out_shape, strides, address, (self, block), "Conv2d")

        def residual_for(shape: torch.Size, channels_first: bool = False):
            """``(x, r) -> act(conv2d(x) + r)`` for float32 CPU inputs of ``shape``
            (channels-last, or contiguous with ``channels_first``) and a channels-last float32
            residual ``r`` of the result's shape, unchecked."""
            out_shape, strides, address, block = (shapes.get((shape, channels_first))
                                                  or sizes(shape, channels_first))
            return unchecked_residual(self._run_residual, out_shape, strides, address,
                                      (self, block))

        conv2d.keep = self  # type: ignore[attr-defined]
        conv2d.direct_for = direct_for  # type: ignore[attr-defined]
        conv2d.residual_for = residual_for  # type: ignore[attr-defined]
        conv2d.reads_channels_first = True  # type: ignore[attr-defined]
        return conv2d


def unchecked(run, out_shape: tuple, strides: tuple, address: int, keep: tuple,
               fails: str | None = None):
    """A convolution's ``x -> result`` for float32 CPU inputs of one shape and layout that
    checks nothing: the channels-last result allocated, ``run`` on the pointers and the
    argument block at ``address`` (``keep``: what the pointers name). ``fails``: the kernel
    returns non-zero when it could not allocate its own memory, and is named in the error.

    ``direct.into(x, out)`` writes the result into ``out`` instead, unchecked too: a float32
    CPU tensor of ``direct.out_shape`` and ``direct.out_strides`` that does not overlap
    ``x`` (an arena tensor: no allocation, ~1 µs of a small convolution's call)."""
    empty_strided = torch.empty_strided

    def into(x: torch.Tensor, out: torch.Tensor) -> None:
        if run(x.data_ptr(), out.data_ptr(), address) and fails is not None:
            raise MemoryError(f"{fails}: no memory for its working copy of the input "
                              f"(result {tuple(out_shape)})")

    def direct(x: torch.Tensor) -> torch.Tensor:
        out = empty_strided(out_shape, strides)
        if run(x.data_ptr(), out.data_ptr(), address) and fails is not None:
            raise MemoryError(f"{fails}: no memory for its working copy of the input "
                                  f"(result {tuple(out_shape)})")
        return out

    direct.keep = into.keep = keep  # type: ignore[attr-defined]
    direct.into = into  # type: ignore[attr-defined]
    direct.out_shape, direct.out_strides = out_shape, strides  # type: ignore[attr-defined]
    return direct


def unchecked_residual(run, out_shape: tuple, strides: tuple, address: int, keep: tuple):
    """``unchecked``'s call with a residual: ``(x, r) -> result``, ``r`` a float32
    channels-last tensor of the result's shape added before the activation (``run`` is
    ``sr_conv2d_res_block``); ``.into(x, r, out)`` writes ``out`` (``r`` may be ``out``)."""
    empty_strided = torch.empty_strided

    def into(x: torch.Tensor, r: torch.Tensor, out: torch.Tensor) -> None:
        if run(x.data_ptr(), out.data_ptr(), r.data_ptr(), address):
            raise MemoryError(f"Conv2d: no memory for its working copy of the input "
                              f"(result {tuple(out_shape)})")

    def direct(x: torch.Tensor, r: torch.Tensor) -> torch.Tensor:
        out = empty_strided(out_shape, strides)
        into(x, r, out)
        return out

    direct.keep = into.keep = keep  # type: ignore[attr-defined]
    direct.into = into  # type: ignore[attr-defined]
    direct.out_shape, direct.out_strides = out_shape, strides  # type: ignore[attr-defined]
    return direct


def channels_last_strides(c: int, h: int, w: int) -> tuple[int, int, int, int]:
    return (h * w * c, 1, w * c, c)
