"""The out-variant tier: implementations that write into a tensor the runtime provides.

Most are derived, not written: for a purely functional schema returning one tensor
(``aten::add.Tensor(Tensor self, Tensor other, *, Scalar alpha=1) -> Tensor``), ATen usually
has an equivalent ``.out`` overload (``aten::add.out(..., *, Tensor(a!) out)``), found by
``schema.find_out_overload``. Hand-written ones are registered where a derived one does not
exist or does not pay: the variadic ``cat``/``stack`` that graph preparation introduces,
``relu`` and ``embedding`` (whose ``.out`` overloads are ATen's allocate-and-copy wrappers).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from static_runtime.ir import schema as S
from static_runtime.ir.graph import Node
from static_runtime.ops import bindings
from static_runtime.ops.fallback import bind_overload
from static_runtime.ops.registry import FLAT_VIEWS, labelled, register_out_variant

OutPair = tuple[Callable[..., Any], Callable[..., Any]]


def derived(node: Node, *, fast_bindings: bool = True) -> OutPair | None:
    """``(fn, out_fn)`` from the schema's ``.out`` overload, or None. With ``fast_bindings``,
    each calls the operator's Python binding where it provably runs the same overload."""
    if node.schema is None or len(node.outputs) != 1:
        return None
    found = S.find_out_overload(node.schema)
    if found is None:
        return None
    out_op, out_name = found
    functional = S.resolve_overload(node.schema)
    if functional is None:
        return None
    info = S.parse(node.schema)
    n = len(node.inputs)
    # The out tensor is the one kept from the previous call, of the dtype that call produced.
    # The runtime drops kept tensors when the graph inputs' dtypes change, but a dtype
    # argument that is not a constant (``torch.sum(x, 0, dtype=d)`` with ``d`` an input or
    # computed) can change while they stay the same: ``sum.out`` would then refuse the kept
    # tensor, and TensorIterator kernels would cast into it silently. Run such nodes
    # functionally.
    for i in info.dtype_argument_indices():
        if i < n and node.inputs[i].node.kind != "prim::Constant":
            return None
    if not fast_bindings:
        return bind_overload(functional, info, n), bind_overload(out_op, info, n, out_name)
    fn, why = bindings.bind(node)
    out_fn, out_why = bindings.bind(node, out_overload=out_op._overloadname)
    return (fn or bind_overload(functional, info, n, why=why),
            out_fn or bind_overload(out_op, info, n, out_name, why=out_why))


# Variadic cat/stack: ``prim::VarConcat(%a, %b, ..., %dim)`` — the list of tensors is the
# node's inputs, so no list is built per call (the seed's design note).


@register_out_variant("prim::VarConcat")
def _var_concat(node: Node) -> OutPair:
    cat = torch.cat

    @labelled("torch.cat (variadic)")
    def fn(*a):
        return cat(a[:-1], a[-1])

    @labelled("torch.cat(out=) (variadic)")
    def out_fn(out, *a):
        return cat(a[:-1], a[-1], out=out)

    return fn, out_fn


@register_out_variant("prim::VarStack")
def _var_stack(node: Node) -> OutPair:
    stack = torch.stack

    @labelled("torch.stack (variadic)")
    def fn(*a):
        return stack(a[:-1], a[-1])

    @labelled("torch.stack(out=) (variadic)")
    def out_fn(out, *a):
        return stack(a[:-1], a[-1], out=out)

    return fn, out_fn


@register_out_variant("aten::relu")
def _relu(node: Node) -> OutPair | None:
    """``relu.out`` is only ATen's generated wrapper (it allocates and copies), but
    ``clamp_min(x, 0)`` is the same function with a real out kernel: NaN stays NaN, integer
    dtypes work alike, and the functional form (first, recording call) is ``relu`` itself,
    so inputs ``relu`` refuses (bool) are refused the same way."""
    if node.schema != "aten::relu(Tensor self) -> Tensor":
        return None
    clamp_min = torch.clamp_min

    @labelled("torch.clamp_min(x, 0, out=) for relu")
    def out_fn(out, x):
        return clamp_min(x, 0, out=out)

    return labelled("torch.relu")(torch.relu), out_fn


_EMBEDDING = ("aten::embedding(Tensor weight, Tensor indices, SymInt padding_idx=-1, "
              "bool scale_grad_by_freq=False, bool sparse=False) -> Tensor")


@register_out_variant("aten::embedding")
def _embedding(node: Node) -> OutPair | None:
    """``embedding``'s forward is ``weight.index_select(0, indices.reshape(-1))`` viewed as
    ``indices.shape + (d,)`` (ATen's ``embedding_symint``; ``padding_idx``,
    ``scale_grad_by_freq`` and ``sparse`` only change the backward), so ``index_select(out=)``
    into the planned tensor, as a (-1, d) matrix, writes the same rows, as fast as the
    allocating call (3.4–3.6 against 3.6 µs for 32 rows of 128, 1 thread) and into the arena.
    ``embedding.out`` is ATen's allocate-and-copy wrapper; it is kept for what does not fit
    (another weight rank, an out tensor of another size)."""
    if node.schema != _EMBEDDING:
        return None
    embedding, index_select = torch.embedding, torch.index_select
    embedding_out = torch.ops.aten.embedding.out
    #: id of an out tensor → (out, its (rows, d) view, the weight's shape and the indices'
    #: shape that fill it): the arena hands the same tensor on every call of a layout, so
    #: the view is made once per layout (and runtime) and a call checks only its arguments'
    #: shapes (see ``selection._linear``; at most ``FLAT_VIEWS`` kept)
    flat_out: dict[int, tuple[torch.Tensor, torch.Tensor, torch.Size, torch.Size]] = {}

    @labelled("torch.embedding")
    def fn(weight, indices, padding_idx, scale_grad_by_freq, sparse):
        return embedding(weight, indices, padding_idx, scale_grad_by_freq, sparse)

    def flat(out, weight, indices):
        cached = flat_out.get(id(out))
        if cached is None or cached[0] is not out or cached[3] != indices.shape:
            if weight.dim() != 2 or not out.is_contiguous():
                return None
            d = weight.shape[1]
            if d == 0 or out.shape != (*indices.shape, d):
                return None
            cached = (out, out.view(-1, d), weight.shape, indices.shape)
            if len(flat_out) >= FLAT_VIEWS:
                flat_out.clear()
            flat_out[id(out)] = cached
        # (index_select would shrink a view too large for its result without a word)
        if weight.shape == cached[2] and indices.shape == cached[3]:
            return cached[1]
        return None

    @labelled("torch.index_select(weight, 0, indices.reshape(-1), out=) for embedding")
    def out_fn(out, weight, indices, padding_idx, scale_grad_by_freq, sparse):
        rows = flat(out, weight, indices)
        if rows is not None:
            index_select(weight, 0, indices if indices.dim() == 1 else indices.reshape(-1),
                         out=rows)
            return out
        return embedding_out(weight, indices, padding_idx, scale_grad_by_freq, sparse, out=out)

    return fn, out_fn
