"""The IR type system: text form round trips and conversion from TorchScript types."""

from __future__ import annotations

import pytest
import torch

from static_runtime.ir import types as T

SPELLINGS: list[tuple[str, T.Type]] = [
    ("Tensor", T.Tensor),
    ("Float(2, 3)", T.TensorType(torch.float32, (2, 3))),
    ("Float(*, 3)", T.TensorType(torch.float32, (None, 3))),
    ("Float()", T.TensorType(torch.float32, ())),
    ("Long", T.TensorType(torch.int64, None)),
    ("Tensor(2, *)", T.TensorType(None, (2, None))),
    ("int", T.Int),
    ("float", T.Float),
    ("bool", T.Bool),
    ("str", T.Str),
    ("NoneType", T.NoneT),
    ("int[]", T.ListType(T.Int)),
    ("Tensor?[]", T.ListType(T.OptionalType(T.Tensor))),
    ("Tensor[]?", T.OptionalType(T.ListType(T.Tensor))),
    ("int[][]", T.ListType(T.ListType(T.Int))),
    ("(Tensor, int)", T.TupleType((T.Tensor, T.Int))),
    ("()", T.TupleType(())),
    ("((int, str), Float(1))", T.TupleType((T.TupleType((T.Int, T.Str)),
                                             T.TensorType(torch.float32, (1,))))),
    ("Dict(str, Tensor)", T.DictType(T.Str, T.Tensor)),
    ("Dict(int, (Tensor, Tensor)[])",
     T.DictType(T.Int, T.ListType(T.TupleType((T.Tensor, T.Tensor))))),
    ("Tensor?", T.OptionalType(T.Tensor)),
    ("Future(Tensor)", T.FutureType(T.Tensor)),
    ("Union(int, str)", T.UnionType((T.Int, T.Str))),
    ("Union(int, str)[]", T.ListType(T.UnionType((T.Int, T.Str)))),
    ("__torch__.M", T.ClassType("__torch__.M")),
    ("__torch__.pkg.___torch_mangle_3.Model", T.ClassType("__torch__.pkg.___torch_mangle_3.Model")),
    ("Any", T.Any),
    ("Scalar", T.Number),
    ("Device", T.Device),
    ("Layout", T.Layout),
    ("ScalarType", T.ScalarTypeT),
    ("MemoryFormat", T.MemoryFormat),
    ("Generator", T.Generator),
    ("complex", T.Complex),
]


@pytest.mark.parametrize(("text", "expected"), SPELLINGS, ids=[s for s, _ in SPELLINGS])
def test_parse_and_print_round_trip(text: str, expected: T.Type) -> None:
    parsed = T.parse_type(text)
    assert parsed == expected
    assert str(parsed) == text
    assert T.parse_type(str(expected)) == expected


def test_whitespace_is_insignificant() -> None:
    assert T.parse_type("  Dict( str ,Tensor )  ") == T.DictType(T.Str, T.Tensor)
    assert T.parse_type("Float(2,3)") == T.TensorType(torch.float32, (2, 3))


def test_torchscript_aliases() -> None:
    assert T.parse_type("number") is T.Number
    assert T.parse_type("string") is T.Str


@pytest.mark.parametrize("text", ["", "Dict(str", "Float(2", "int[", "Float(a)", "int int",
                                  "%x", "Tensor)"])
def test_malformed_types_raise_type_parse_error(text: str) -> None:
    with pytest.raises(T.TypeParseError):
        T.parse_type(text)


def _scripted_input_types() -> list[torch._C.Type]:
    def f(x: torch.Tensor, y: list[int], z: dict[str, torch.Tensor],
          w: tuple[torch.Tensor, int], o: torch.Tensor | None, u: list[torch.Tensor | None],
          d: torch.device, s: str, fl: float, b: bool, un: int | str,
          fu: torch.jit.Future[torch.Tensor]) -> torch.Tensor:
        return x

    return [v.type() for v in torch.jit.script(f).graph.inputs()]


def test_from_torch_on_scripted_function_inputs() -> None:
    converted = [T.from_torch(t) for t in _scripted_input_types()]
    assert converted == [
        T.Tensor,
        T.ListType(T.Int),
        T.DictType(T.Str, T.Tensor),
        T.TupleType((T.Tensor, T.Int)),
        T.OptionalType(T.Tensor),
        T.ListType(T.OptionalType(T.Tensor)),
        T.Device,
        T.Str,
        T.Float,
        T.Bool,
        T.UnionType((T.Int, T.Str)),
        T.FutureType(T.Tensor),
    ]
    for t in converted:
        assert T.parse_type(str(t)) == t


def test_from_torch_keeps_dtype_and_shape() -> None:
    t = torch._C.TensorType.create_from_tensor(torch.zeros(2, 3, dtype=torch.int64))
    assert T.from_torch(t) == T.TensorType(torch.int64, (2, 3))
    assert str(T.from_torch(t)) == "Long(2, 3)"


def test_from_torch_scalars_and_classes() -> None:
    assert T.from_torch(torch._C.IntType.get()) is T.Int
    assert T.from_torch(torch._C.NumberType.get()) is T.Number
    assert T.from_torch(torch._C.NoneType.get()) is T.NoneT

    class M(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x

    self_type = next(iter(torch.jit.script(M()).graph.inputs())).type()
    converted = T.from_torch(self_type)
    assert isinstance(converted, T.ClassType)
    assert converted.name.startswith("__torch__.") and converted.name.endswith(".M")
    assert T.parse_type(str(converted)) == converted


def test_mutability() -> None:
    assert T.is_mutable_type(T.Tensor)
    assert T.is_mutable_type(T.ListType(T.Int))
    assert T.is_mutable_type(T.Any)
    assert not T.is_mutable_type(T.Int)
    assert not T.is_mutable_type(T.TupleType((T.Int, T.Str)))
    assert T.is_mutable_type(T.TupleType((T.Int, T.Tensor)))
    assert not T.is_mutable_type(T.OptionalType(T.Int))
