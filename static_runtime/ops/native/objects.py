"""Objects: module attributes that survive freezing, and TorchScript class instances.

Both are ``ScriptObjectValue``s (``ir/values.py``; the importer mirrors a frozen module's
state into them): ``prim::GetAttr``/``prim::SetAttr`` read and write their
attribute dict. Other objects (TorchScript class instances kept as Python objects in
constants, custom C++ classes) are read and written through their own interface.
"""

from __future__ import annotations

import torch

from static_runtime.ir.graph import Node
from static_runtime.ir.values import ScriptObjectValue
from static_runtime.ops.registry import register_native


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
