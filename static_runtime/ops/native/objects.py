"""Objects: module attributes that survive freezing, and TorchScript class instances."""

from __future__ import annotations

import torch

from static_runtime.ir.graph import Node
from static_runtime.ops.registry import register_native


class ScriptObjectValue:
    """An instance of a TorchScript class created by the graph (``prim::CreateObject``).

    Its attributes live in a dict; the class's methods were inlined into the graph, so the
    object needs nothing else."""

    __slots__ = ("type_name", "attrs")

    def __init__(self, type_name: str):
        self.type_name = type_name
        self.attrs: dict = {}

    def __repr__(self) -> str:
        return f"<{self.type_name} object {self.attrs}>"


@register_native("prim::CreateObject")
def _create_object(node: Node):
    name = str(node.output.type)
    return lambda: ScriptObjectValue(name)


def _get(obj, name):
    if isinstance(obj, ScriptObjectValue):
        try:
            return obj.attrs[name]
        except KeyError:
            raise AttributeError(f"{obj.type_name} object has no attribute {name!r}") from None
    if isinstance(obj, torch._C.ScriptObject):
        return obj.getattr(name)
    return getattr(obj, name)


def _set(obj, name, value):
    if isinstance(obj, ScriptObjectValue):
        obj.attrs[name] = value
    elif isinstance(obj, torch._C.ScriptObject):
        obj.setattr(name, value)
    else:
        setattr(obj, name, value)


@register_native("prim::GetAttr")
def _getattr(node: Node):
    name = node.attrs["name"]
    return lambda obj: _get(obj, name)


@register_native("prim::SetAttr")
def _setattr(node: Node):
    name = node.attrs["name"]
    return lambda obj, value: _set(obj, name, value)
