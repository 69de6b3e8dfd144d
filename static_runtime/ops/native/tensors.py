"""Tensor metadata, casts and ``contiguous``: one C call each, selected by exact schema.

PyTorch binds ``Tensor.to``, ``contiguous``, ``size``, ``device``... by hand (torchgen's skip
list), so ``bindings.bind`` never proves them, and through ``torch.ops`` they cost 2–4 µs
where the work is a pointer comparison. Here each schema gets the Python spelling that
reaches the same ATen call, with constants converted once:

* ``aten::contiguous`` → ``TensorBase.contiguous(x[, memory_format=])``: the binding returns
  ``x`` itself when ``x.is_contiguous(memory_format)``, else ``x.contiguous(memory_format)``,
  as ATen's ``contiguous`` does.
* ``aten::to`` → ``TensorBase.to(x, device=, dtype=, non_blocking=, copy=, memory_format=)``
  (keywords: they fit the binding's first signature, ``to(Device device=None, ScalarType
  dtype=None, ...)``, which calls ``Tensor::to`` with the dtype, or the device and the dtype,
  that were given, i.e. the ``.dtype``/``.device`` overloads; neither given and no copy and no
  memory format: ``x`` itself, as TorchScript's ``to.prim_*`` and ATen's ``to_will_alias``
  decide). A cast that changes nothing returns ``x`` itself without copying; the schemas say
  the result aliases ``self`` (``Tensor(a)``/``Tensor(b|a)``), so the alias analysis keeps
  it out of the arena and away from inputs and outputs. ``.dtype_layout`` only without a
  layout or pinned memory (the binding takes neither).
* ``prim::device``/``prim::dtype``/``prim::layout``, ``aten::numel``/``stride``/
  ``is_contiguous``, ``prim::is_cuda``/``is_nested``, ``prim::type`` (of a device): the
  attribute or method itself. ``prim::dtype``/``prim::layout`` return TorchScript's ints.

ScalarType, Layout and MemoryFormat values that are not constants are TorchScript's ints
(what ``prim::dtype`` returns): converted through ``enums.enum_list``.
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from typing import Any

import torch

from static_runtime.ir.graph import Node, Value
from static_runtime.ops import enums
from static_runtime.ops.python_signatures import Kind
from static_runtime.ops.registry import labelled, register_native

TB = torch._C.TensorBase
_ABSENT = object()


def schema_of(qualified: str) -> str:
    """PyTorch's own text of an overload's schema (``aten::to.dtype``), as nodes carry it."""
    name, _, overload = qualified.partition(".")
    for s in torch._C._jit_get_schemas_for_operator(name):
        if s.overload_name == overload:
            return str(s)
    raise KeyError(qualified)


def _const(v: Value) -> Any:
    if v.node.kind != "prim::Constant":
        return _ABSENT
    return v.node.attrs.get("value")


def _enum(kind: Kind, v: Value) -> Any:
    """A constant enum input as its Python object (None stays None), else ``_ABSENT``."""
    value = _const(v)
    if value is _ABSENT or value is None:
        return value
    if isinstance(value, (torch.dtype, torch.layout, torch.memory_format)):
        return value
    if type(value) is int:
        return enums.enum_table(kind).get(value, _ABSENT)
    return _ABSENT


def _by_schema(*overloads: str) -> Callable:
    """Register a factory for the kinds of ``overloads``, called only for nodes whose schema
    is exactly one of them (with the overload's name as second argument)."""
    schemas = {schema_of(o): o for o in overloads}
    kinds = sorted({o.partition(".")[0] for o in overloads})

    def deco(factory: Callable[[Node, str], Callable | None]) -> Callable:
        def select(node: Node) -> Callable | None:
            overload = schemas.get(node.schema or "")
            return factory(node, overload) if overload is not None else None

        register_native(*kinds)(select)
        return factory

    return deco


# --------------------------------------------------------------------------- metadata


@register_native("prim::device")
def _device(node: Node):
    if node.schema != schema_of("prim::device"):
        return None
    return labelled("x.device")(operator.attrgetter("device"))


@register_native("prim::dtype")
def _dtype(node: Node):
    if node.schema != schema_of("prim::dtype"):
        return None
    codes = {obj: code for code, obj in enums.enum_table(Kind.DTYPE).items()}
    if not codes:
        return None
    return labelled("TorchScript's int of x.dtype")(lambda x: codes[x.dtype])


@register_native("prim::layout")
def _layout(node: Node):
    if node.schema != schema_of("prim::layout"):
        return None
    codes = {obj: code for code, obj in enums.enum_table(Kind.LAYOUT).items()}
    if not codes:
        return None
    return labelled("TorchScript's int of x.layout")(lambda x: codes[x.layout])


_ATTRIBUTES = {"prim::is_cuda": "is_cuda", "prim::is_nested": "is_nested", "prim::type": "type"}


@register_native(*_ATTRIBUTES)
def _attribute(node: Node):
    if node.schema != schema_of(node.kind):
        return None
    attr = _ATTRIBUTES[node.kind]
    return labelled(f"x.{attr}")(operator.attrgetter(attr))


@_by_schema("aten::numel", "aten::is_contiguous")
def _method(node: Node, overload: str):
    name = overload.split("::")[1].partition(".")[0]
    return labelled(f"Tensor.{name}")(getattr(TB, name))


@register_native("aten::stride")
def _stride(node: Node):
    if node.schema == schema_of("aten::stride.int"):
        return labelled("Tensor.stride")(TB.stride)
    if node.schema != schema_of("aten::stride"):
        return None
    return labelled("list(x.stride())")(lambda x: list(x.stride()))


# --------------------------------------------------------------------------- contiguous


@_by_schema("aten::contiguous")
def _contiguous(node: Node, overload: str):
    contiguous = TB.contiguous
    fmt = _enum(Kind.MEMORY_FORMAT, node.inputs[1])
    if fmt is torch.contiguous_format:
        return labelled("Tensor.contiguous(x)")(lambda x, _fmt: contiguous(x))
    if fmt is not _ABSENT and fmt is not None:
        return labelled(f"Tensor.contiguous(x, memory_format={fmt})")(
            lambda x, _fmt: contiguous(x, memory_format=fmt))
    formats = enums.enum_list(Kind.MEMORY_FORMAT)
    return labelled("Tensor.contiguous(x, memory_format=)")(
        lambda x, f: contiguous(x, memory_format=formats[f]))


# --------------------------------------------------------------------------- to


class _Call:
    """Keyword arguments of one ``TensorBase.to`` call: constants converted once, inputs
    (by index) converted per call."""

    def __init__(self, node: Node):
        self.node = node
        self.fixed: dict[str, Any] = {}
        self.dynamic: list[tuple[str, int, Kind | None]] = []
        #: how many inputs are passed positionally (``self``, and ``other`` for ``to.other``)
        self.positional = 1

    def arg(self, name: str, index: int, kind: Kind | None = None, default: Any = None) -> bool:
        v = self.node.inputs[index]
        value = _enum(kind, v) if kind is not None else _const(v)
        if value is _ABSENT:
            if kind is not None and not enums.int_enum(v.type):
                return False
            self.dynamic.append((name, index, kind))
        elif value != default or type(value) is not type(default):
            self.fixed[name] = value
        return True

    def build(self, what: str) -> Callable:
        to = TB.to
        fixed = dict(self.fixed)
        shown = ", ".join(["x", "other"][:self.positional]
                          + [f"{k}={v!r}" for k, v in fixed.items()]
                          + [f"{k}=" for k, _, _ in self.dynamic])
        label = f"Tensor.to({shown}) ({what.split('::')[1]})"
        if not self.dynamic:
            if self.positional == 2:
                return labelled(label)(lambda x, other, *_: to(x, other, **fixed))
            if not fixed:
                return labelled(label)(lambda x, *_: to(x))
            dtype = fixed.get("dtype")
            if list(fixed) == ["dtype"] and isinstance(dtype, torch.dtype):
                # Only a dtype, no copy, no memory format: ATen returns ``x`` itself when the
                # dtype is already that (``to_will_alias``); the binding would first release
                # and retake the GIL to find out.
                return labelled(label)(
                    lambda x, *_: x if x.dtype is dtype else to(x, dtype=dtype))
            return labelled(label)(lambda x, *_: to(x, **fixed))
        dynamic = [(name, index, enums.enum_list(kind) if kind is not None else None)
                   for name, index, kind in self.dynamic]
        positional = self.positional

        def cast(*args):
            kw = dict(fixed)
            for name, index, table in dynamic:
                value = args[index]
                kw[name] = value if table is None or value is None else table[value]
            return to(*args[:positional], **kw)

        return labelled(label)(cast)


@_by_schema("aten::to.dtype", "aten::to.device", "aten::to.other", "aten::to.dtype_layout",
            "aten::to.prim_Device", "aten::to.prim_dtype", "aten::to.prim_other")
def _to(node: Node, overload: str):
    call = _Call(node)
    D, L, M = Kind.DTYPE, Kind.LAYOUT, Kind.MEMORY_FORMAT
    form = overload.partition(".")[2]
    if form == "other":
        # ``to(Tensor other, ...)``: the binding's third signature takes the device and the
        # dtype of ``other`` (a dense tensor's layout is strided either way).
        args = [("non_blocking", 2, None, False), ("copy", 3, None, False),
                ("memory_format", 4, M)]
        call.positional = 2
    elif form == "dtype_layout":
        if not (_enum(L, node.inputs[2]) in (None, torch.strided)
                and _const(node.inputs[4]) in (None, False)):
            return None
        args = [("dtype", 1, D), ("device", 3, None), ("non_blocking", 5, None, False),
                ("copy", 6, None, False), ("memory_format", 7, M)]
    else:
        args = {
            "dtype": [("dtype", 1, D), ("non_blocking", 2, None, False), ("copy", 3, None, False),
                      ("memory_format", 4, M)],
            "device": [("device", 1, None), ("dtype", 2, D), ("non_blocking", 3, None, False),
                       ("copy", 4, None, False), ("memory_format", 5, M)],
            "prim_Device": [("device", 1, None), ("dtype", 2, D),
                            ("non_blocking", 3, None, False), ("copy", 4, None, False)],
            "prim_dtype": [("dtype", 1, D), ("non_blocking", 2, None, False),
                           ("copy", 3, None, False)],
            "prim_other": [("non_blocking", 1, None, False), ("copy", 2, None, False)],
        }[form]
    for spec in args:
        name, index, kind, *default = spec
        if not call.arg(name, index, kind, default[0] if default else None):
            return None
    return call.build(overload)
