"""``aten::index_add_`` along the first dimension — a mixture of experts adding each expert's
weighted output back at its tokens' rows, a scatter of messages in a graph network — by
measurement (``ops/kernels.py``), per count of indexed rows (up to the same power of two) and
row length, between

* ``aten``: ``Tensor.index_add_`` (the default; ~2.5 µs a call before its first row here);
* ``native``: our loop over the indices (``ops/ckernels/eltwise.c``, ``sr_index_add_rows``):
  every index checked first, then each source row added to its row of ``self`` in the
  order of ``index``, as ATen adds them,

timed on clones of ``self`` (an in-place operator written twice would not compare), for a
contiguous float32 CPU ``self``, a contiguous int64 CPU vector ``index``, a contiguous float32
CPU ``source`` of ``(len(index), *self.shape[1:])`` and ``alpha`` 1; anything else — and an
index out of range, which ATen reports — runs ``index_add_``.

``static_runtime::index_add_scaled_(self, index, source, scale)`` (``passes/scatter.py``: a
mixture of experts' ``out.index_add_(0, rows, y * w.unsqueeze(-1))``) means
``self.index_add_(0, index, source * scale.unsqueeze(-1))``; chosen the same way between that
composite and our loop multiplying each source row by its weight as it adds it (the product
rounded first, as the multiply gives it), for a 2-D ``self`` and ``source`` and a 1-D
``scale`` of one weight a row.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from static_runtime.ir.graph import Node
from static_runtime.ir.own_ops import INDEX_ADD_SCALED
from static_runtime.ops import ckernels
from static_runtime.ops.kernels import KernelChooser, PerShape, size_bucket
from static_runtime.ops.registry import (
    implement_torch_ops,
    labelled,
    register_measured,
    register_native,
)

_SCHEMA = str(torch.ops.aten.index_add_.default._schema)


@register_native("aten::index_add_")
def _native(node: Node):
    if node.schema != _SCHEMA:
        return None

    @labelled("Tensor.index_add_")
    def index_add_(self, dim, index, source, alpha=1):
        return self.index_add_(dim, index, source, alpha=alpha)

    return index_add_


def _decider(per_shape: PerShape, what: str, ours: Callable[..., bool],
             reference: Callable[..., Any]) -> Callable[..., str]:
    """``decide(key, self, *args)``: the kernel for a bucket of row counts, measured on clones
    of ``self`` (an in-place operator written twice would not compare) between
    ``reference(self, *args)`` and ``ours(self, *args)`` (False: an index out of range, and
    ours is dropped: ATen's answers)."""
    def decide(key, self, *args) -> str:
        def native():
            copy = self.clone()
            if not ours(copy, *args):
                raise RuntimeError("an index out of range")  # (dropped: ATen's answers)
            return copy

        return per_shape.choose(
            key, f"{what} float32 rows<={key[0][0]} row={key[0][1]} contiguous",
            lambda: {"aten": lambda: reference(self.clone(), *args), "native": native})

    return decide


@register_measured("aten::index_add_")
def _measured(node: Node, chooser: KernelChooser, default: Callable[..., Any]
              ) -> Callable[..., Any] | None:
    if node.schema != _SCHEMA or not ckernels.available():
        return None
    run = ckernels.library().sr_index_add_rows
    per_shape = PerShape(chooser, ("aten", "native"))
    chosen = per_shape.chosen
    f32, i64, threads = torch.float32, torch.int64, torch.get_num_threads

    def ours(self, index, source) -> bool:
        rows = self.shape[0]
        status = run(self.data_ptr(), rows, self.numel() // rows if rows else 0,
                     index.data_ptr(), index.shape[0], source.data_ptr())
        return status == 0

    decide = _decider(per_shape, "index_add_", ours,
                      lambda self, index, source: self.index_add_(0, index, source))

    @labelled("index_add_: kernel chosen per row count by measurement")
    def fn(self, dim, index, source, alpha=1):
        if (dim == 0 or (self.dim() and dim == -self.dim())) and alpha == 1 \
                and self.dtype is f32 and source.dtype is f32 and index.dtype is i64 \
                and self.is_cpu and source.is_cpu and index.is_cpu and index.dim() == 1 \
                and self.dim() >= 1 and source.shape[0] == index.shape[0] \
                and source.shape[1:] == self.shape[1:] and self.is_contiguous() \
                and source.is_contiguous() and index.is_contiguous() and self.numel():
            key = ((size_bucket(index.shape[0]), self.numel() // self.shape[0]), threads())
            name = chosen.get(key) or decide(key, self, index, source)
            if name == "native" and ours(self, index, source):
                return self
        return default(self, dim, index, source, alpha)

    return per_shape.expose(fn, ("index_add_",), ("rows<=", "row="))


def index_add_scaled_reference(self, index, source, scale):
    """What ``static_runtime::index_add_scaled_`` means: the operators it replaced."""
    return self.index_add_(0, index, source * scale.unsqueeze(-1))


@register_native("static_runtime::index_add_scaled_")
def _native_scaled(node: Node):
    if node.schema != INDEX_ADD_SCALED:
        return None
    return labelled("self.index_add_(0, index, source * scale.unsqueeze(-1))")(
        index_add_scaled_reference)


@register_measured("static_runtime::index_add_scaled_")
def _measured_scaled(node: Node, chooser: KernelChooser, default: Callable[..., Any]
                     ) -> Callable[..., Any] | None:
    if node.schema != INDEX_ADD_SCALED or not ckernels.available():
        return None
    run = ckernels.library().sr_index_add_rows_scaled
    per_shape = PerShape(chooser, ("aten", "native"))
    chosen = per_shape.chosen
    f32, i64, threads = torch.float32, torch.int64, torch.get_num_threads

    def ours(self, index, source, scale) -> bool:
        status = run(self.data_ptr(), self.shape[0], self.shape[1], index.data_ptr(),
                     index.shape[0], source.data_ptr(), scale.data_ptr())
        return status == 0

    decide = _decider(per_shape, "index_add_scaled_", ours, index_add_scaled_reference)

    @labelled("index_add_scaled_: kernel chosen per row count by measurement")
    def fn(self, index, source, scale):
        if self.dtype is f32 and source.dtype is f32 and scale.dtype is f32 \
                and index.dtype is i64 and self.is_cpu and source.is_cpu and index.is_cpu \
                and scale.is_cpu and self.dim() == 2 and source.dim() == 2 \
                and index.dim() == 1 and scale.dim() == 1 \
                and source.shape[0] == index.shape[0] == scale.shape[0] \
                and source.shape[1] == self.shape[1] and self.numel() \
                and self.is_contiguous() and source.is_contiguous() \
                and index.is_contiguous() and scale.is_contiguous() \
                and self.data_ptr() != source.data_ptr():
            key = ((size_bucket(index.shape[0]), self.shape[1]), threads())
            name = chosen.get(key) or decide(key, self, index, source, scale)
            if name == "native" and ours(self, index, source, scale):
                return self
        return default(self, index, source, scale)

    return per_shape.expose(fn, ("index_add_scaled_",), ("rows<=", "row="))


implement_torch_ops(((INDEX_ADD_SCALED, index_add_scaled_reference),))
