"""``aten::scaled_dot_product_attention`` in inference (``dropout_p`` 0), and the attention
nodes ``passes/fusion.py`` makes of written-out attention (``static_runtime::attention`` and
``masked_attention``, ``ops/native/fused.py``): under ``StaticModuleOptions(
kernel_choice="measure")`` their kernel is chosen by measurement (``ops/kernels.py``) between

* ``aten``: PyTorch's operator, or the fused node's own choice between PyTorch's fused
  kernel and the written-out operators (the default);
* ``native``: our kernel (``ops/ckernels/attention.c``): per (batch, head) the key transposed
  once, sixteen scores a vector, the softmax vectorised, the output a weighted sum of value
  rows — where PyTorch's kernels spend more around a small head than in it.

Ours is claimed for float32 CPU query, key and value of rank 4 with unit last strides (any
other strides: views of the projections, as models make them), head sizes up to 256, and a
mask that is None, a float32 one added to the scores or a boolean one (true: attend)
broadcastable to the scores' shape, or ``is_causal`` (not both), grouped-query heads with
``enable_gqa``; for the fused nodes, a softmax over the last dimension, a key given
transposed with contiguous rows, and their three mask kinds. Its result has the strides the
default gives for the same arguments (read from the measuring call), so a ``view`` after it
works as it did. A call in which a query row is masked entirely runs the default (whose
kernels disagree there: 0 or NaN). Choices are shared by the sequence lengths up to the
same power of two (``size_bucket``), as a GEMM's row counts are; anything else runs the
default.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch

from static_runtime.ir.graph import Node
from static_runtime.ir.own_ops import ATTENTION, MASKED_ATTENTION
from static_runtime.ops import ckernels
from static_runtime.ops.kernels import KernelChooser, PerShape, size_bucket
from static_runtime.ops.registry import labelled, register_measured, register_native
from static_runtime.ops.selection import constant_value
from static_runtime.ops.strides import dense_strides

_SCHEMA = str(torch.ops.aten.scaled_dot_product_attention.default._schema)
#: the head sizes our kernel takes (``MAX_D`` in attention.c)
MAX_HEAD = 256


def _sdpa_call(n: int) -> Callable[..., Any]:
    """PyTorch's operator for a node of ``n`` inputs (an exported graph may leave the
    defaulted ones out): ``scale`` and ``enable_gqa`` are keyword-only."""
    sdpa = torch._C._nn.scaled_dot_product_attention

    def call(q, k, v, mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
        return sdpa(q, k, v, mask, dropout_p, is_causal, scale=scale, enable_gqa=enable_gqa)

    return call


@register_native("aten::scaled_dot_product_attention")
def _native(node: Node):
    if node.schema != _SCHEMA:
        return None
    return labelled("torch.nn.functional.scaled_dot_product_attention")(
        _sdpa_call(len(node.inputs)))


def _mask_strides(mask: torch.Tensor, shape: tuple[int, int, int, int]) -> tuple | None:
    """The mask's strides as a (B, H, Lq, Lk) tensor it broadcasts to (0 where it does), or
    None where it does not broadcast to ``shape``."""
    if mask.dim() > 4:
        return None
    sizes = (1,) * (4 - mask.dim()) + tuple(mask.shape)
    strides = (0,) * (4 - mask.dim()) + tuple(mask.stride())
    out = []
    for size, stride, want in zip(sizes, strides, shape, strict=True):
        if size == want:
            out.append(stride if want > 1 else 0)
        elif size == 1:
            out.append(0)
        else:
            return None
    return tuple(out)


class _Kernel:
    """Our kernel's calls for one node: per layout key, an unchecked call or None (the
    default's), chosen by measurement per sequence-length bucket."""

    def __init__(self, chooser: KernelChooser, causal: bool, gqa: bool, invert: bool):
        self.per_shape = PerShape(chooser, ("aten", "native"))
        self.calls: dict[tuple, Any] = {}
        #: (bucket, the arguments' layout pattern) → the dimension order of the default's
        #: dense result: a new size of a decided bucket gets our call without a run of the
        #: default (traffic of every size: a new length's first call ran it and ours twice)
        self.orders: dict[tuple, tuple[int, ...]] = {}
        self.causal, self.gqa, self.invert = causal, gqa, invert
        self.run = ckernels.library().sr_attention

    def direct_for(self, q, k, v, mask, factor: float, out_shape, out_strides):
        """Our kernel for tensors laid out as these, unchecked; None where it does not take
        them. ``k`` is (B, Hk, Lk, D): the key, not its transpose. One key/value head
        (multi-query attention) broadcasts over the query heads as grouped-query attention with
        one group does, whether or not ``enable_gqa`` says so.

        (On the request path at each new sequence length: every size and stride is read once.)"""
        (B, H, Lq, D), (kb_, Hk, Lk, Dk), (vb_, Hv, Lv, Dv) = q.shape, k.shape, v.shape
        qs, ks, vs = q.stride(), k.stride(), v.stride()
        if not (kb_ == vb_ == B and Dk == D and Lv == Lk and Hv == Hk and Hk > 0
                and H % Hk == 0 and (Hk == H or Hk == 1 or self.gqa) and 0 < D <= MAX_HEAD
                and 0 < Dv <= MAX_HEAD and Lq > 0 and Lk > 0 and B > 0
                and qs[3] == ks[3] == vs[3] == 1
                and out_shape == (B, H, Lq, Dv) and out_strides[3] == 1):
            return None
        f32, boolean = torch.float32, torch.bool
        if mask is None:
            mask_strides, kind = (0, 0, 0, 0), None
        else:
            if self.causal or mask.dtype not in (f32, boolean) or not mask.is_cpu:
                return None
            mask_strides = _mask_strides(mask, (B, H, Lq, Lk))
            if mask_strides is None:
                return None
            kind = mask.dtype
        array, address = ckernels._block(
            B, H, Lq, Lk, D, Dv, H // Hk, int(self.causal), qs[0], qs[1], qs[2], ks[0], ks[1],
            ks[2], vs[0], vs[1], vs[2], out_strides[0], out_strides[1], out_strides[2],
            *mask_strides, int(self.invert))
        # (bound by defaults, ``_owner`` what the address names: kept per size, and a
        # closure's cells and an attribute's dict are objects the collector tracks)
        def direct(q, k, v, mask, run=self.run, empty_strided=torch.empty_strided,
                   shape=tuple(out_shape), strides=tuple(out_strides), kind=kind,
                   factor=factor, address=address, f32=f32, boolean=boolean, _owner=array):
            out = empty_strided(shape, strides)
            fptr = bptr = None
            if kind is f32:
                fptr = mask.data_ptr()
            elif kind is boolean:
                bptr = mask.data_ptr()
            status = run(q.data_ptr(), k.data_ptr(), v.data_ptr(), fptr, bptr,
                         out.data_ptr(), factor, address)
            if status:
                if status < 0:
                    raise MemoryError("attention: no memory for a call's scratch block")
                return None  # a query row masked entirely: the default answers
            return out

        return direct

    def decide(self, key: tuple, q, k, v, mask, factor: float, expected: torch.Tensor,
               again: Callable[[], Any], what: str):
        """The call for ``key`` (made, measured or remembered, and kept)."""
        direct = self.direct_for(q, k, v, mask, factor, expected.shape, expected.stride())
        if direct is None:
            return ckernels.remember(self.calls, key, None)
        if direct(q, k, v, mask) is None:
            return None  # a row masked entirely in this call: decide on another one
        bucket = _bucket(q, k, key)
        order = _dense_order(expected)
        if order is not None:
            ckernels.remember(self.orders, self._order_key(bucket, what, q, k, v, mask,
                                                           expected.shape), order)
        name = self.per_shape.chosen.get(bucket)
        if name is None:
            name = self.per_shape.choose(bucket, self._problem(what, q, k, v, mask, bucket),
                                         lambda: {"aten": again,
                                                  "native": lambda: direct(q, k, v, mask)})
        return ckernels.remember(self.calls, key, direct if name == "native" else None)

    def _problem(self, what: str, q, k, v, mask, bucket: tuple) -> str:
        """What a bucket's choice is remembered by (on disk too)."""
        B, H, Lq, D = q.shape
        Lk, Dv = k.shape[2], v.shape[3]
        # (the mask's strides by kind, not value: a length's strides would name one length)
        masking = ("causal" if self.causal else "none" if mask is None else
                   f"{mask.dtype} " + "".join("b" if s == 0 else "1" if s == 1 else "s"
                                              for s in _mask_strides(mask, (B, H, Lq, Lk))))
        layout = "/".join(str(t.is_contiguous()) for t in (q, k, v))
        return (f"{what} float32 B={B} H={H} Hk={k.shape[1]} Lq<={bucket[0][2]} "
                f"Lk<={bucket[0][3]} D={D} Dv={Dv} mask={masking} contiguous={layout}")

    @staticmethod
    def _order_key(bucket: tuple, what: str, q, k, v, mask, out_shape) -> tuple:
        """What the default's result layout is remembered by: PyTorch's operator picks its
        kernel by layouts, not lengths (every bucket shares it); a fused node's own choice
        between it and the written-out operators is kept per bucket."""
        return (None if what == "sdpa" else bucket, _pattern(q, k, v, mask, out_shape))

    def serve(self, q, k, v, mask, factor: float, default_call: Callable[[], Any], what: str,
              transposed: bool = False):
        """The node's result: by the call kept for this layout (decided on its first call),
        else by ``default_call``. With ``transposed``, ``k`` is the key's transpose (the
        fused nodes' ``key_t``): the layout key reads it as it is, and the view our kernel
        takes is made only when our kernel runs."""
        key = _key(q, k, v, mask)
        calls = self.calls
        if key in calls:
            call = calls[key]
            if call is None:
                return default_call()
            if transposed:
                k = k.transpose(2, 3)
        else:
            if transposed:
                k = k.transpose(2, 3)
            call = self.known(key, q, k, v, mask, factor, what)
            if call is _UNDECIDED:
                expected = default_call()
                call = self.decide(key, q, k, v, mask, factor, expected, default_call, what)
                if call is None:
                    return expected
            elif call is None:
                return default_call()
        out = call(q, k, v, mask)
        return out if out is not None else default_call()

    def known(self, key: tuple, q, k, v, mask, factor: float, what: str):
        """The call for a new ``key`` whose bucket is decided or remembered on disk (kept),
        made without running the default: ours with its result dense in the order the
        default's was at an earlier key of the same argument layouts, or None (the
        default's). ``_UNDECIDED`` where the bucket's choice or that order is not known.
        (On the request path at each new sequence length.)"""
        bucket = _bucket(q, k, key)
        name = self.per_shape.chosen.get(bucket)
        if name is not None and name != "native":
            return ckernels.remember(self.calls, key, None)
        shape = (*q.shape[:3], v.shape[3])
        order = self.orders.get(self._order_key(bucket, what, q, k, v, mask, shape))
        if order is None:
            return _UNDECIDED
        if name is None:
            name = self.per_shape.remembered(bucket, self._problem(what, q, k, v, mask,
                                                                   bucket))
            if name is None:
                return _UNDECIDED
            if name != "native":
                return ckernels.remember(self.calls, key, None)
        direct = self.direct_for(q, k, v, mask, factor, shape, dense_strides(shape, order))
        return ckernels.remember(self.calls, key, direct)


#: ``_Kernel.known``'s answer where the default must decide
_UNDECIDED = object()


def _one_per_query(mask: torch.Tensor, q: torch.Tensor, k: torch.Tensor) -> bool:
    """Whether ``mask`` (4-D) holds one value per query row, the same along the keys (stride
    0 there: an expanded ``(…, Lq, 1)``), and broadcasts into ``q``'s batch, heads and rows
    without widening them. Such a boolean mask that is all true masks nothing: an exported
    encoder given no padding mask (HuBERT, DINOv2, SEW under ``torch.export``) builds one from
    sizes on every call, and our kernel reads a mask at every score (~60 % more time at 160
    positions). Checking it reads one value a row."""
    if mask.dim() != 4 or mask.stride(3) != 0:
        return False
    shape = mask.shape
    return shape[3] in (1, k.shape[2]) and shape[3] >= 1 and all(
        m == 1 or m == t for m, t in zip(shape[:3], q.shape[:3]))


def _bucket(q, k, key: tuple) -> tuple:
    """The sizes sharing a measured choice: sequence lengths up to the same power of two."""
    B, H, Lq, _ = q.shape
    return (torch.Size((B, H, size_bucket(Lq), size_bucket(k.shape[2]))), key[-1])


def _order_of(strides: tuple[int, ...]) -> tuple[int, ...]:
    """The dimensions of a tensor of these strides from the largest stride to the smallest
    (ties by position: a stable sort, reversed, keeps equal strides in their order)."""
    return tuple(sorted(range(len(strides)), key=strides.__getitem__, reverse=True))


def _pattern(q, k, v, mask, out_shape) -> tuple:
    """What the default's choice of result layout may depend on apart from the sizes: the
    arguments' dimension orders, the mask's kind and which result dimensions are 1 (their
    strides are arbitrary, so an order read where one was 1 is not taken where it is not).
    (On the request path at each new sequence length: one frame, no generator.)"""
    of = _order_of
    m = None if mask is None else (mask.dtype, mask.dim(), of(mask.stride()))
    b, h, lq, dv = out_shape
    return (of(q.stride()), of(k.stride()), of(v.stride()), m,
            (b == 1, h == 1, lq == 1, dv == 1))


def _dense_order(t: torch.Tensor) -> tuple[int, ...] | None:
    """The dimension order in which ``t`` is dense (no gaps, no overlap), or None."""
    order = _order_of(t.stride())
    if t.stride() != dense_strides(t.shape, order):
        return None
    return order


def _key(q, k, v, mask) -> tuple:
    m = None if mask is None else (mask.shape, mask.stride(), mask.dtype)
    return (q.shape, q.stride(), k.shape, k.stride(), v.shape, v.stride(), m,
            torch.get_num_threads())


@register_measured("aten::scaled_dot_product_attention")
def _measured(node: Node, chooser: KernelChooser, default: Callable[..., Any]
              ) -> Callable[..., Any] | None:
    if node.schema != _SCHEMA or not ckernels.available():
        return None
    n = len(node.inputs)
    flags = [constant_value(v) for v in node.inputs[4:8]]
    dropout, causal, scale, gqa = flags + [0.0, False, None, False][len(flags):]
    if NotImplemented in (dropout, causal, scale, gqa) or dropout != 0.0 \
            or type(causal) is not bool or type(gqa) is not bool \
            or not (scale is None or type(scale) is float):
        return None
    kernel = _Kernel(chooser, causal, gqa, invert=False)
    f32, boolean = torch.float32, torch.bool

    @labelled("scaled_dot_product_attention: kernel chosen per shape by measurement")
    def fn(q, k, v, mask=None, *rest):
        if q.dtype is f32 and k.dtype is f32 and v.dtype is f32 and q.dim() == 4 \
                and k.dim() == 4 and v.dim() == 4 and q.is_cpu and k.is_cpu and v.is_cpu:
            if mask is not None and mask.dtype is boolean and _one_per_query(mask, q, k) \
                    and mask.select(3, 0).all():
                mask = None  # (it masks nothing)
            factor = 1.0 / math.sqrt(q.shape[3]) if scale is None else scale
            return kernel.serve(q, k, v, mask, factor, lambda: default(q, k, v, mask, *rest),
                                "sdpa")
        return default(q, k, v, mask, *rest)

    return kernel.per_shape.expose(fn, ("scaled_dot_product_attention", n))


@register_measured("static_runtime::attention", "static_runtime::masked_attention")
def _measured_fused(node: Node, chooser: KernelChooser, default: Callable[..., Any]
                    ) -> Callable[..., Any] | None:
    """The attention nodes of written-out attention: ``matmul(softmax(matmul(q, key_t) ·
    scale + mask), value)`` (``ops/native/fused.py``)."""
    if node.schema not in (ATTENTION, MASKED_ATTENTION) or not ckernels.available():
        return None
    scale, divide, dim = (constant_value(v) for v in node.inputs[3:6])
    kind = constant_value(node.inputs[7]) if node.schema == MASKED_ATTENTION else None
    if NotImplemented in (scale, divide, dim, kind) or dim not in (-1, 3) \
            or type(divide) is not bool or kind not in (None, "add", "fill", "keep") \
            or not (scale is None or type(scale) in (int, float)) or scale == 0:
        return None
    factor = 1.0 if scale is None else (1.0 / scale if divide else float(scale))
    kernel = _Kernel(chooser, causal=False, gqa=False, invert=kind == "fill")
    f32, boolean = torch.float32, torch.bool
    mask_dtype = None if kind is None else f32 if kind == "add" else boolean

    @labelled("attention: kernel chosen per shape by measurement")
    def fn(q, key_t, v, scale_, divide_, dim_, *masking):
        mask = masking[0] if masking else None
        if q.dtype is f32 and key_t.dtype is f32 and v.dtype is f32 and q.dim() == 4 \
                and key_t.dim() == 4 and v.dim() == 4 and q.is_cpu and key_t.is_cpu \
                and v.is_cpu and (mask is None or mask.dtype is mask_dtype):
            args = (q, key_t, v, scale_, divide_, dim_, *masking)
            return kernel.serve(q, key_t, v, mask, factor, lambda: default(*args),
                                "attention", transposed=True)
        return default(q, key_t, v, scale_, divide_, dim_, *masking)

    return kernel.per_shape.expose(fn, ("attention", kind))
