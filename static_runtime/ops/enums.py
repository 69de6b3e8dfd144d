"""TorchScript's ints for dtypes, layouts and memory formats, and the Python objects they
stand for: a TorchScript graph carries ``ScalarType``/``Layout``/``MemoryFormat`` values as
ints, where Python bindings and native implementations take ``torch.dtype``... objects."""

from __future__ import annotations

import functools
import keyword
from typing import Any

import torch

from static_runtime.ir import types as T
from static_runtime.ops.python_signatures import Kind

#: Schema types carried as ints in TorchScript, and the kind of object each stands for.
ENUM_TYPES = {"ScalarType": Kind.DTYPE, "Layout": Kind.LAYOUT, "MemoryFormat": Kind.MEMORY_FORMAT}


def int_enum(t: T.Type) -> bool:
    """Whether a value of IR type ``t`` is TorchScript's int spelling of an enum (or None)."""
    if isinstance(t, T.OptionalType):
        t = t.elem
    return t in (T.Int, T.ScalarTypeT, T.Layout, T.MemoryFormat)


@functools.cache
def enum_table(kind: Kind) -> dict[int, Any]:
    """TorchScript's int for each dtype, layout and memory format, asked of TorchScript itself
    (a function returning the object compiles to an int constant)."""
    cls = {Kind.DTYPE: torch.dtype, Kind.LAYOUT: torch.layout,
           Kind.MEMORY_FORMAT: torch.memory_format}[kind]
    table: dict[int, Any] = {}
    for attr in sorted(dir(torch)):
        obj = getattr(torch, attr, None)
        if not isinstance(obj, cls) or not attr.isidentifier() or keyword.iskeyword(attr):
            continue
        code = _torchscript_int(attr)
        if isinstance(code, int) and table.setdefault(code, obj) != obj:
            return {}  # two objects for one int: trust nothing
    return table


@functools.cache
def enum_list(kind: Kind) -> tuple[Any, ...]:
    """``enum_table(kind)`` as a tuple indexed by the int. An int without an object stays
    an int, which the binding refuses with a TypeError (a negative or too large one raises
    IndexError), as TorchScript refuses an unknown ScalarType."""
    table = enum_table(kind)
    return tuple(table.get(i, i) for i in range(max(table, default=-1) + 1))


def _torchscript_int(attr: str) -> int | None:
    """What ``torch.<attr>`` is in TorchScript, or None if TorchScript does not know it."""
    try:
        return torch.jit.CompilationUnit(f"def f():\n    return torch.{attr}\n").f()
    except Exception:  # noqa: BLE001  (a dtype TorchScript does not know is left out)
        return None
