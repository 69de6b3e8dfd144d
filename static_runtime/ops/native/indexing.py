"""``static_runtime::index_flat(self, dim, indices)`` (``passes/indexing.py`` makes it): what
``aten::index`` computes for ``self[(:,)*dim + indices]`` with 1-D index tensors on adjacent
dimensions, as one ``index_select`` of those dimensions flattened, by the linear indices.

The linear indices depend on the sizes of the dimensions indexed: made once per such sizes
(the few the module sees are kept), after checking every index is in range there (negative
ones counted from the end, as ``aten::index`` does). Out of range — where the linear index
would land on another row's element — or a ``self`` that is not contiguous (its flattening
would copy) or of too low a rank, ``aten::index`` itself runs and raises what it raises.
"""

from __future__ import annotations

import math

import torch

from static_runtime.ir.graph import Node
from static_runtime.ir.own_ops import INDEX_FLAT
from static_runtime.ops.registry import implement_torch_ops, labelled, register_native
from static_runtime.ops.selection import constant_value

#: How many sizes of the indexed dimensions a node keeps linear indices for.
_SIZES_KEPT = 16


def index_flat_reference(self, dim, indices):
    """What ``static_runtime::index_flat`` means: ``aten::index`` with ``dim`` leading
    ``None``s (full slices) and then ``indices``."""
    return torch.ops.aten.index.Tensor(self, [None] * dim + list(indices))


def linear_indices(indices: list[torch.Tensor], sizes: tuple[int, ...]) -> torch.Tensor | None:
    """``Σ_j i_j · Π_{l>j} sizes[l]`` (row-major over ``sizes``), each index counted from
    the end where negative; None if one is outside ``[-size, size)`` of its dimension."""
    linear = torch.zeros_like(indices[0])
    for idx, size in zip(indices, sizes):
        if len(idx) and (int(idx.min()) < -size or int(idx.max()) >= size):
            return None
        linear = linear * size + torch.where(idx < 0, idx + size, idx)
    return linear


@register_native("static_runtime::index_flat")
def _index_flat(node: Node):
    if node.schema != INDEX_FLAT:
        return None
    dim, indices = constant_value(node.inputs[1]), constant_value(node.inputs[2])
    if type(dim) is not int or not isinstance(indices, list) or not indices:
        return None
    k = len(indices)
    last = dim + k
    #: sizes of the indexed dimensions → linear indices (None: one index out of range there)
    kept: dict[tuple[int, ...], torch.Tensor | None] = {}
    select = torch.index_select

    @labelled(f"index_select of {k} dimension(s) flattened, by linear indices")
    def index_flat(x, dim_, indices_):
        if indices_ is indices and type(x) is torch.Tensor and x.dim() >= last \
                and x.is_contiguous():
            sizes = tuple(x.shape[dim:last])
            if sizes in kept:
                linear = kept[sizes]
            else:
                linear = linear_indices(indices, sizes)
                if len(kept) >= _SIZES_KEPT:
                    kept.clear()
                kept[sizes] = linear
            if linear is not None:
                flat = x if k == 1 else x.view(*x.shape[:dim], math.prod(sizes),
                                               *x.shape[last:])
                return select(flat, dim, linear)
        return index_flat_reference(x, dim_, indices_)

    return index_flat


implement_torch_ops(((INDEX_FLAT, index_flat_reference),))
