"""Operators that graph preparation introduces and ATen does not have.

``static_runtime::add`` / ``static_runtime::sub``: ``aten::add``/``aten::sub`` (``.Tensor``
and ``.Scalar``) whose ``alpha`` was the constant 1 (``passes/alpha.py``). Without ``alpha``
they bind to the cheapest call, ``torch.add(a, b)``; the result, dtype included, is the same
as with ``alpha=1``. Their schemas (``SPECIALIZED_SCHEMAS``) say the output is fresh.

They are also defined as PyTorch operators (``torch.ops.static_runtime.add.Tensor``...) when
this module is imported, so that a prepared graph printed and parsed back
(``ir.parser.resolve_kind``) finds their schemas, and the fallback tier could run them too.
"""

from __future__ import annotations

import torch

from static_runtime.ir.graph import Node
from static_runtime.ops.registry import (
    InlineCall,
    forwards,
    labelled,
    register_native,
    register_out_variant,
)

#: Overload → schema of each specialised kind (schemas are what alias analysis reads).
SPECIALIZED_SCHEMAS = {
    "static_runtime::add.Tensor": "static_runtime::add.Tensor(Tensor self, Tensor other) -> Tensor",
    "static_runtime::add.Scalar": "static_runtime::add.Scalar(Tensor self, Scalar other) -> Tensor",
    "static_runtime::sub.Tensor": "static_runtime::sub.Tensor(Tensor self, Tensor other) -> Tensor",
    "static_runtime::sub.Scalar": "static_runtime::sub.Scalar(Tensor self, Scalar other) -> Tensor",
}


def _define_torch_ops() -> None:
    lib = torch.library.Library("static_runtime", "FRAGMENT")
    impls = {"add": torch.add, "sub": torch.sub}
    for overload, schema in SPECIALIZED_SCHEMAS.items():
        name = overload.split("::", 1)[1]
        base, overload_name = name.split(".")
        try:
            existing = getattr(torch.ops.static_runtime, base).overloads()
        except (AttributeError, RuntimeError):
            existing = []
        if overload_name in existing:
            continue  # already defined (this module was imported under another name)
        lib.define(schema.split("::", 1)[1])
        lib.impl(name, lambda a, b, op=impls[base]: op(a, b), "CompositeExplicitAutograd")
    _LIBRARIES.append(lib)


#: Keeps the operator definitions alive (dropping a Library object deregisters them).
_LIBRARIES: list[torch.library.Library] = []


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


@register_out_variant("static_runtime::add")
def _add_out(node: Node):
    return _pair(torch.add)


@register_out_variant("static_runtime::sub")
def _sub_out(node: Node):
    return _pair(torch.sub)


@register_native("static_runtime::add")
def _add(node: Node):
    return _pair(torch.add)[0]


@register_native("static_runtime::sub")
def _sub(node: Node):
    return _pair(torch.sub)[0]


_define_torch_ops()
