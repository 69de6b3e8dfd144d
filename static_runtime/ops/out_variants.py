"""The out-variant tier: implementations that write into a tensor the runtime provides.

Most are derived, not written: for a purely functional schema returning one tensor
(``aten::add.Tensor(Tensor self, Tensor other, *, Scalar alpha=1) -> Tensor``), ATen usually
has an equivalent ``.out`` overload (``aten::add.out(..., *, Tensor(a!) out)``), found by
``schema.find_out_overload``. Hand-written ones are registered where a derived one does not
exist or does not pay: the variadic ``cat``/``stack`` that graph preparation introduces.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from static_runtime.ir.graph import Node
from static_runtime.ops import bindings
from static_runtime.ops import schema as S
from static_runtime.ops.fallback import bind_overload
from static_runtime.ops.registry import labelled, register_out_variant

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
