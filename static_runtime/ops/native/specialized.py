"""Operators that graph preparation introduces and ATen does not have.

``static_runtime::add`` / ``static_runtime::sub``: ``aten::add``/``aten::sub`` (``.Tensor``
and ``.Scalar``) whose ``alpha`` was the constant 1 (``passes/alpha.py``). Without ``alpha``
they bind to the cheapest call, ``torch.add(a, b)``; the result, dtype included, is the same
as with ``alpha=1``; a constant number operand (``.Scalar``) is passed as a tensor made once
(``ops/scalar_operands.py``). Their schemas say the output is fresh.

Their schemas are declared in ``ir/own_ops.py``, as PyTorch operators too
(``torch.ops.static_runtime.add.Tensor``...); this module gives those operators ``torch.add``
and ``torch.sub`` as their implementations, so the fallback tier could run them too.
"""

from __future__ import annotations

import torch

from static_runtime.ir.graph import Node
from static_runtime.ir.own_ops import SPECIALIZED_SCHEMAS
from static_runtime.ops.registry import (
    InlineCall,
    forwards,
    implement_torch_ops,
    labelled,
    register_native,
    register_out_variant,
)
from static_runtime.ops.scalar_operands import constant_number, constant_operand_pair


def _pair(op):
    name = op.__name__

    @labelled(f"torch.{name} (alpha=1 specialised)")
    def fn(a, b):
        return op(a, b)

    @forwards(InlineCall(op, (0, 1), out="out"))
    @labelled(f"torch.{name}(out=) (alpha=1 specialised)")
    def out_fn(out, a, b):
        return op(a, b, out=out)

    return fn, out_fn


def _node_pair(op, node: Node):
    """The pair for ``node``: with a constant number ``other`` (the ``.Scalar`` overload, or
    ``.Tensor`` given a number by an exported program), that number as a tensor made once
    (``ops/scalar_operands.py``)."""
    value = constant_number(node, alpha=False)
    if value is not NotImplemented:
        return constant_operand_pair(op, value, op.__name__)
    return _pair(op)


@register_out_variant("static_runtime::add")
def _add_out(node: Node):
    return _node_pair(torch.add, node)


@register_out_variant("static_runtime::sub")
def _sub_out(node: Node):
    return _node_pair(torch.sub, node)


@register_native("static_runtime::add")
def _add(node: Node):
    return _node_pair(torch.add, node)[0]


@register_native("static_runtime::sub")
def _sub(node: Node):
    return _node_pair(torch.sub, node)[0]


_MEANINGS = {"static_runtime::add": torch.add, "static_runtime::sub": torch.sub}
implement_torch_ops((schema, _pair(_MEANINGS[name.split(".")[0]])[0])
                    for name, schema in SPECIALIZED_SCHEMAS.items())
