"""TorchScript's ints for dtypes, layouts and memory formats, as TorchScript itself gives them."""

import torch

from static_runtime.ir import types as T
from static_runtime.ops.enums import enum_list, enum_table, int_enum
from static_runtime.ops.python_signatures import Kind


def _torchscript_int(expr: str) -> int:
    return torch.jit.CompilationUnit(f"def f():\n    return {expr}\n").f()


def test_tables_agree_with_torchscript():
    dtypes = enum_table(Kind.DTYPE)
    assert dtypes[_torchscript_int("torch.float32")] is torch.float32
    assert dtypes[_torchscript_int("torch.int64")] is torch.int64
    assert enum_table(Kind.LAYOUT)[_torchscript_int("torch.strided")] is torch.strided
    formats = enum_table(Kind.MEMORY_FORMAT)
    assert formats[_torchscript_int("torch.channels_last")] is torch.channels_last


def test_list_is_indexed_by_the_int():
    dtypes = enum_list(Kind.DTYPE)
    for code, obj in enum_table(Kind.DTYPE).items():
        assert dtypes[code] is obj


def test_ints_that_may_spell_an_enum():
    assert int_enum(T.Int) and int_enum(T.OptionalType(T.Int)) and int_enum(T.ScalarTypeT)
    assert not int_enum(T.Tensor) and not int_enum(T.Float)
