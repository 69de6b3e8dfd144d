"""Operator selection that uses constants known at preparation time.

Hand-written implementations that pay because an argument is a constant of the prepared
graph (frozen parameters), as the seed's "Operator selection" describes:

* ``aten::linear`` with a constant weight → ``addmm(bias, x, weight.t(), out=)`` for 2-D
  inputs: the transposed view is made once, and ``addmm`` skips ``linear``'s dispatch
  (measured 2.05 against 2.52 µs for a 1 × 64 · 64 × 64 product, single-threaded). A
  contiguous input of rank >= 3 is folded to 2-D: ``addmm(bias, x.view(-1, k),
  weight.t(), out=out.view(-1, n))`` (``mm`` without a bias). That is what eager
  ``linear`` runs for such an input (``_flatten_nd_linear`` in ATen's ``Linear.cpp``, for a
  1-D bias and strided tensors; ``matmul`` folds the same way without one), so results are
  bitwise those of eager and the TorchScript interpreter — whereas ``linear.out`` runs
  ``matmul_out`` and then ``add_`` (two passes, and other bits for k >= 512). The view of
  the planned tensor is made once per layout; the input's view costs ~0.8 µs a call, so at
  BERT's batch-1 sizes (32 × 128 · 128 × 128) this is level with ``linear(out=)`` within
  0.4 µs, and the pass it saves pays at larger batches. Other inputs call ``linear``.
* ``aten::slice.Tensor`` with a constant dimension and step → Python indexing
  ``x[:, ..., start:end:step]``, start and end constants or inputs (the same ``at::slice``
  view, reached through ``Tensor.__getitem__``'s fast path: 1.1 against 3.7 µs through
  ``torch.ops``); a tensor of too small a rank takes ``torch.ops`` and raises its error.
* ``aten::index.Tensor`` with constant indices ``[None, ..., None, i_1, ..., i_m]`` (m
  one-dimensional int64 tensors of one length, indexing the last m dimensions) →
  ``index_select`` of the flattened last m dimensions with the equivalent flat index, made
  once per input shape (DLRM's interaction ``Z[:, rows, cols]``: 5.4 → 1.7 µs at batch 1,
  41 → 5.6 µs at batch 256). An index out of range, another rank, or a non-contiguous input
  takes ``aten::index`` (and its error).
* ``aten::index.Tensor`` with indices computed at run time → ``index_select`` for one 1-D
  index into a contiguous tensor (``x[idx]``), ``Tensor.__getitem__`` where every index is a
  tensor of rank ≥ 1 (``x[i, j]``): both skip ``torch.ops``' conversion of the index list.
"""

from __future__ import annotations

from typing import Any

import torch

from static_runtime.ir import types as T
from static_runtime.ir.graph import Node, Value
from static_runtime.ops.registry import FLAT_VIEWS, labelled, register_out_variant

_LINEAR = "aten::linear(Tensor input, Tensor weight, Tensor? bias=None) -> Tensor"


def constant_value(v: Value) -> Any:
    """The value of a ``prim::Constant`` output, or ``NotImplemented`` if ``v`` is not one."""
    if v.node.kind != "prim::Constant":
        return NotImplemented
    return v.node.attrs.get("value")


@register_out_variant("aten::linear")
def _linear(node: Node):
    if node.schema != _LINEAR:
        return None
    weight = constant_value(node.inputs[1])
    bias = constant_value(node.inputs[2])
    if not isinstance(weight, torch.Tensor) or weight.dim() != 2 or weight.layout != torch.strided:
        return None
    if bias is not None and not (isinstance(bias, torch.Tensor) and bias.dim() == 1
                                 and bias.layout == torch.strided):
        return None
    linear, addmm, mm = torch._C._nn.linear, torch.addmm, torch.mm
    weight_t = weight.t()
    n, k = weight.shape
    # Folding needs ``view(-1, k)`` and ``view(-1, n)`` to be unambiguous.
    fold = k > 0 and n > 0
    #: id of an out tensor → (out, its (rows, n) view, the input shape that fills it, rows):
    #: the arena hands the same out tensor on every call of a layout, so the view is made
    #: once per layout (and runtime), and a call checks only the input (entries are read as
    #: one tuple: concurrent runtimes at worst make one twice)
    flat_out: dict[int, tuple[torch.Tensor, torch.Tensor, torch.Size, int]] = {}

    def flat(out, x):
        """``(out, out as a (rows, n) matrix, x's shape, rows)`` if ``x`` (rank >= 3,
        contiguous) folds into a (rows, k) matrix whose product fills ``out`` exactly; else
        None."""
        cached = flat_out.get(id(out))
        if cached is not None and cached[0] is out and x.shape == cached[2]:
            return cached if x.is_contiguous() else None
        if not (fold and x.shape[-1] == k and out.dim() == x.dim() and out.shape[-1] == n
                and out.is_contiguous()):
            return None
        rows = out.numel() // n
        cached = (out, out.view(rows, n), torch.Size((*out.shape[:-1], k)), rows)
        if len(flat_out) >= FLAT_VIEWS:
            flat_out.clear()
        flat_out[id(out)] = cached
        return cached if x.shape == cached[2] and x.is_contiguous() else None

    # The fast path applies when the arguments are those constants (an identity check): a
    # planning run on meta tensors passes meta copies, which take the general path.
    if bias is None:
        @labelled("torch.mm(x, W.t()) (constant weight)")
        def fn(x, w, _b):
            if w is weight and x.dim() == 2:
                return mm(x, weight_t)
            return linear(x, w)

        @labelled("torch.mm(x, W.t(), out=) (constant weight; rank >= 3 folded to 2-D)")
        def out_fn(out, x, w, _b):
            if w is weight:
                rank = x.dim()
                if rank == 2:
                    return mm(x, weight_t, out=out)
                folded = flat(out, x) if rank > 2 else None
                if folded is not None:
                    mm(x.view(folded[3], k), weight_t, out=folded[1])
                    return out
                if rank == 1:  # as linear computes it for a vector (see below)
                    mm(x.unsqueeze(0), weight_t, out=out.unsqueeze(0))
                    return out
            return linear(x, w, out=out)

        return fn, out_fn

    @labelled("torch.addmm(b, x, W.t()) (constant weight)")
    def fn_b(x, w, b):
        if w is weight and b is bias and x.dim() == 2:
            return addmm(bias, x, weight_t)
        return linear(x, w, b)

    @labelled("torch.addmm(b, x, W.t(), out=) (constant weight; rank >= 3 folded to 2-D)")
    def out_fn_b(out, x, w, b):
        if w is weight and b is bias:
            rank = x.dim()
            if rank == 2:
                return addmm(bias, x, weight_t, out=out)
            folded = flat(out, x) if rank > 2 else None
            if folded is not None:
                addmm(bias, x.view(folded[3], k), weight_t, out=folded[1])
                return out
            if rank == 1:
                # ``linear.out`` resizes ``out`` to (1, n) and back for a vector (a
                # deprecation warning, and metadata churn on an arena tensor). ``linear``
                # computes a vector's product as a (1, k) · (k, n) ``mm``, then adds the
                # bias: the same, written into a (1, n) view of ``out``.
                mm(x.unsqueeze(0), weight_t, out=out.unsqueeze(0))
                return out.add_(bias)
        return linear(x, w, b, out=out)

    return fn_b, out_fn_b


_SLICE = "aten::slice.Tensor(Tensor(a) self, int dim=0, SymInt? start=None, SymInt? end=None, SymInt step=1) -> Tensor(a)"
_INDEX = "aten::index.Tensor(Tensor self, Tensor?[] indices) -> Tensor"


def tensor_slice(node: Node):
    """A native for ``aten::slice.Tensor`` with a constant dimension and step, or None.

    ``x[:, s:e:step]`` reaches ``at::slice(x, dim, s, e, step)`` through
    ``Tensor.__getitem__`` (start None → 0, end None → INT64_MAX, as ``aten::slice`` reads
    them; negatives wrap and out-of-range bounds clamp in ``at::slice`` itself). Start and end
    may be inputs (ints, or None). A negative dimension indexes from the end (``x[..., s:e]``).
    A full slice comes back as a new view (``__getitem__`` aliases it), as from
    ``aten::slice``. Rank too small or a step below 1: ``aten::slice`` and its error."""
    if node.schema != _SLICE:
        return None
    dim, step = constant_value(node.inputs[1]), constant_value(node.inputs[4])
    if type(dim) is not int or type(step) is not int or step < 1:
        return None
    bounds = []
    for k, v in ((2, node.inputs[2]), (3, node.inputs[3])):
        c = constant_value(v)
        if c is NotImplemented:
            if not (v.type is T.Int or (isinstance(v.type, T.OptionalType) and v.type.elem is T.Int)):
                return None
            bounds.append("se"[k - 2])
        elif c is None or type(c) is int:
            bounds.append(_fmt(c))
        else:
            return None
    span = f"{bounds[0]}:{bounds[1]}" + (f":{step}" if step != 1 else "")
    index = f"{':, ' * dim}{span}" if dim >= 0 else f"..., {span}{', :' * (-dim - 1)}"
    rank = dim + 1 if dim >= 0 else -dim
    namespace = {"aten_slice": torch.ops.aten.slice.Tensor}
    src = (f"def sliced(x, d, s, e, st):\n"
           f"    if x.dim() >= {rank}:\n"
           f"        return x[{index}]\n"
           f"    return aten_slice(x, d, s, e, st)\n")
    exec(compile(src, f"<static_runtime slice x[{index}]>", "exec"), namespace)  # noqa: S102
    return labelled(f"x[{index}]")(namespace["sliced"])


def _fmt(x) -> str:
    return "" if x is None else str(x)


@register_out_variant("aten::index")
def _index(node: Node):
    if node.schema != _INDEX:
        return None
    indices = constant_value(node.inputs[1])
    if indices is NotImplemented:
        return _rows(node) if _one_tensor_index(node.inputs[1]) else _by_item()
    if not isinstance(indices, (list, tuple)) or not indices:
        return None
    lead = 0
    while lead < len(indices) and indices[lead] is None:
        lead += 1
    tail = list(indices[lead:])
    if len(tail) < 1 or not all(
            isinstance(t, torch.Tensor) and t.dtype is torch.int64 and t.dim() == 1
            and not t.is_meta for t in tail) or len({t.numel() for t in tail}) != 1:
        return None
    rank = lead + len(tail)
    index_select, aten_index = torch.index_select, torch.ops.aten.index.Tensor
    aten_index_out = torch.ops.aten.index.Tensor_out
    flat_for: dict[tuple[int, ...], torch.Tensor | None] = {}

    def flat_index(sizes: tuple[int, ...]) -> torch.Tensor | None:
        """The flat index into the last dimensions of shape ``sizes``, or None if an index
        is out of range (``aten::index`` then raises)."""
        flat = torch.zeros_like(tail[0])
        for t, size in zip(tail, sizes, strict=True):
            if t.numel() and (int(t.min()) < -size or int(t.max()) >= size):
                return None
            flat = flat * size + torch.where(t < 0, t + size, t)
        return flat

    def prepared(x, idx):
        if (idx is not indices or x.dim() != rank or not x.is_contiguous() or x.is_meta
                or not x.numel()):
            return None
        sizes = tuple(x.shape[lead:])
        flat = flat_for.get(sizes, False)
        if flat is False:
            flat = flat_for[sizes] = flat_index(sizes)
        return flat

    label = "index_select of the flattened last dims (constant indices)"

    @labelled(label)
    def fn(x, idx):
        flat = prepared(x, idx)
        if flat is None:
            return aten_index(x, idx)
        return index_select(x.view(*x.shape[:lead], -1), lead, flat)

    @labelled(label + ", out=")
    def out_fn(out, x, idx):
        flat = prepared(x, idx)
        if flat is None:
            return aten_index_out(x, idx, out=out)
        return index_select(x.view(*x.shape[:lead], -1), lead, flat, out=out)

    return fn, out_fn


def _by_item():
    """``x[i, j, ...]`` for indices computed at run time (a router's ``weights[rows, slot]``,
    a pooler's ``h[arange(B), last]``): where ``x`` and every index are plain tensors and each
    index is an int64, int32 or boolean tensor of rank ≥ 1, ``Tensor.__getitem__`` of them as
    a tuple — which records each as an advanced index and calls ``aten::index.Tensor`` itself,
    so the result is that operator's (a new tensor) — at 7.8 against 12.4 µs through
    ``torch.ops`` for 4 rows of a (32, 2) tensor (where the list of optional tensors is
    converted by the schema). Otherwise (a None, a 0-d index, which ``__getitem__`` would
    read as an integer and answer with a view, another dtype) ``aten::index``. The out form
    is ``aten::index.Tensor_out``, as without this."""
    aten_index, aten_index_out = torch.ops.aten.index.Tensor, torch.ops.aten.index.Tensor_out
    plain, kinds = torch.Tensor, (torch.int64, torch.int32, torch.bool)

    @labelled("x[i, j, ...] by Tensor.__getitem__ where every index is a tensor of rank >= 1")
    def fn(x, idx):
        if type(x) is plain:
            for t in idx:
                if type(t) is not plain or not t.dim() or t.dtype not in kinds:
                    break
            else:
                return x[tuple(idx)]
        return aten_index(x, idx)

    @labelled("torch.ops.aten.index.Tensor_out")
    def out_fn(out, x, idx):
        return aten_index_out(x, idx, out=out)

    return fn, out_fn


def _one_tensor_index(v: Value) -> bool:
    """``v`` is made by ``prim::ListConstruct`` of one tensor (never None): ``x[idx]``."""
    return (v.node.kind == "prim::ListConstruct" and len(v.node.inputs) == 1
            and isinstance(v.node.inputs[0].type, T.TensorType))


def _rows(node: Node):
    """``x[idx]`` for an index computed at run time (a router's rows, a batch's
    permutation): with a 1-D int64/int32 index into a contiguous ``x``, the rows of ``x``
    by ``index_select`` — the same values in the same (contiguous) layout, at 1.5 against
    2.5 µs for 4 rows of 64 and 4.9 against 26 µs for 1,024 rows. ``index_select`` refuses a
    negative index, which ``aten::index`` counts from the end, and an index past the end:
    then ``aten::index`` runs, computing or raising what it does. A boolean mask, another
    rank of index or a strided ``x`` runs ``aten::index``."""
    index_select, aten_index = torch.index_select, torch.ops.aten.index.Tensor
    aten_index_out = torch.ops.aten.index.Tensor_out
    int64, int32 = torch.int64, torch.int32

    def simple(x, idx) -> bool:
        t = idx[0]
        return (t is not None and t.dim() == 1 and (t.dtype is int64 or t.dtype is int32)
                and x.dim() >= 1 and x.is_contiguous() and x.is_cpu and t.is_cpu)

    @labelled("index_select(x, 0, idx) for x[idx]")
    def fn(x, idx):
        if simple(x, idx):
            try:
                return index_select(x, 0, idx[0])
            except (IndexError, RuntimeError):  # (negative, past the end: ATen's decides)
                pass
        return aten_index(x, idx)

    @labelled("index_select(x, 0, idx, out=) for x[idx]")
    def out_fn(out, x, idx):
        if simple(x, idx) and out.is_contiguous() and out.dtype == x.dtype \
                and out.shape == (idx[0].shape[0], *x.shape[1:]):
            try:
                return index_select(x, 0, idx[0], out=out)
            except (IndexError, RuntimeError):
                pass
        return aten_index_out(x, idx, out=out)

    return fn, out_fn
