"""The IR's type system.

Types are immutable values with a canonical text form (``str(t)``) close to
TorchScript's own: ``Tensor``, ``Float(2, 3)``, ``int``, ``int[]``,
``(Tensor, int)``, ``Dict(str, Tensor)``, ``Tensor?``, ``__torch__.M``.
``parse_type`` reads that form back, and ``from_torch`` converts a
``torch._C.Type``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import torch


class Type:
    """Base of all IR types. Subclasses are frozen dataclasses."""

    def is_tensor(self) -> bool:
        return isinstance(self, TensorType)

    def contains_tensor_or_mutable(self) -> bool:
        """Whether a value of this type may hold something that can be mutated or aliased."""
        return True


@dataclass(frozen=True)
class TensorType(Type):
    """A tensor, with an optional dtype and an optional shape (``None`` dims are unknown)."""

    dtype: torch.dtype | None = None
    shape: tuple[int | None, ...] | None = None

    def __str__(self) -> str:
        if self.dtype is None and self.shape is None:
            return "Tensor"
        name = _DTYPE_TO_NAME.get(self.dtype, "Tensor") if self.dtype is not None else "Tensor"
        if self.shape is None:
            return name if self.dtype is not None else "Tensor"
        dims = ", ".join("*" if d is None else str(d) for d in self.shape)
        return f"{name}({dims})"


@dataclass(frozen=True)
class _Simple(Type):
    name: str

    def __str__(self) -> str:
        return self.name

    def contains_tensor_or_mutable(self) -> bool:
        return False


@dataclass(frozen=True)
class ListType(Type):
    elem: Type

    def __str__(self) -> str:
        # Postfix ``?`` and ``[]`` read left to right, so ``Tensor?[]`` is a list of optionals
        # (TorchScript's own spelling); parentheses here would read back as a 1-tuple.
        return f"{self.elem}[]"


@dataclass(frozen=True)
class TupleType(Type):
    elems: tuple[Type, ...]

    def __str__(self) -> str:
        return "(" + ", ".join(str(e) for e in self.elems) + ")"

    def contains_tensor_or_mutable(self) -> bool:
        return any(e.contains_tensor_or_mutable() for e in self.elems)


@dataclass(frozen=True)
class DictType(Type):
    key: Type
    value: Type

    def __str__(self) -> str:
        return f"Dict({self.key}, {self.value})"


@dataclass(frozen=True)
class OptionalType(Type):
    elem: Type

    def __str__(self) -> str:
        return f"{self.elem}?"

    def contains_tensor_or_mutable(self) -> bool:
        return self.elem.contains_tensor_or_mutable()


@dataclass(frozen=True)
class UnionType(Type):
    members: tuple[Type, ...]

    def __str__(self) -> str:
        return "Union(" + ", ".join(str(m) for m in self.members) + ")"


@dataclass(frozen=True)
class FutureType(Type):
    elem: Type

    def __str__(self) -> str:
        return f"Future({self.elem})"


@dataclass(frozen=True)
class ClassType(Type):
    """A TorchScript class or module type, by qualified name."""

    name: str

    def __str__(self) -> str:
        return self.name


@dataclass(frozen=True)
class OpaqueType(Type):
    """A type the IR does not model structurally (kept by its TorchScript spelling)."""

    name: str

    def __str__(self) -> str:
        return f"Opaque({self.name})"


Int = _Simple("int")
Float = _Simple("float")
Bool = _Simple("bool")
Str = _Simple("str")
NoneT = _Simple("NoneType")
Device = _Simple("Device")
Number = _Simple("Scalar")
Complex = _Simple("complex")
Layout = _Simple("Layout")
ScalarTypeT = _Simple("ScalarType")
MemoryFormat = _Simple("MemoryFormat")
Generator = _Simple("Generator")
Any = _Simple("Any")
Tensor = TensorType()

_SIMPLE = {
    t.name: t
    for t in (Int, Float, Bool, Str, NoneT, Device, Number, Complex, Layout, ScalarTypeT,
              MemoryFormat, Generator, Any)
}

_NAME_TO_DTYPE: dict[str, torch.dtype] = {
    "Float": torch.float32, "Double": torch.float64, "Half": torch.float16,
    "BFloat16": torch.bfloat16, "Long": torch.int64, "Int": torch.int32, "Short": torch.int16,
    "Char": torch.int8, "Byte": torch.uint8, "Bool": torch.bool,
    "ComplexFloat": torch.complex64, "ComplexDouble": torch.complex128,
    "ComplexHalf": torch.complex32, "UInt16": torch.uint16, "UInt32": torch.uint32,
    "UInt64": torch.uint64,
}
_DTYPE_TO_NAME = {v: k for k, v in _NAME_TO_DTYPE.items()}


def is_mutable_type(t: Type) -> bool:
    """Whether values of ``t`` can be written to or can alias (tensors, containers, objects)."""
    if t is Any:
        return True
    return t.contains_tensor_or_mutable()


# --------------------------------------------------------------------------- parsing


class TypeParseError(ValueError):
    pass


_TOKEN = re.compile(r"\s*(\[\]|[A-Za-z_][A-Za-z0-9_.]*|\d+|[(),?*\[\]])")


def parse_type(text: str) -> Type:
    """Read a type from its canonical text form."""
    tokens = _tokenize(text)
    try:
        t, pos = _parse(tokens, 0, text)
    except (IndexError, ValueError) as e:
        if isinstance(e, TypeParseError):
            raise
        raise TypeParseError(f"cannot read type {text!r}: it is truncated or malformed") from e
    if pos != len(tokens):
        raise TypeParseError(f"unexpected {tokens[pos]!r} in type {text!r}")
    return t


def _tokenize(text: str) -> list[str]:
    tokens, pos = [], 0
    text = text.rstrip()
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if not m:
            raise TypeParseError(f"cannot read type {text!r} at {text[pos:]!r}")
        tokens.append(m.group(1))
        pos = m.end()
    return tokens


def _parse(tokens: list[str], pos: int, text: str) -> tuple[Type, int]:
    t, pos = _parse_atom(tokens, pos, text)
    while pos < len(tokens) and tokens[pos] in ("[]", "?"):
        t = ListType(t) if tokens[pos] == "[]" else OptionalType(t)
        pos += 1
    return t, pos


def _expect(tokens: list[str], pos: int, tok: str, text: str) -> int:
    if pos >= len(tokens) or tokens[pos] != tok:
        raise TypeParseError(f"expected {tok!r} in type {text!r}")
    return pos + 1


def _parse_list_of_types(tokens, pos, text) -> tuple[list[Type], int]:
    items: list[Type] = []
    pos = _expect(tokens, pos, "(", text)
    while tokens[pos] != ")":
        item, pos = _parse(tokens, pos, text)
        items.append(item)
        if tokens[pos] == ",":
            pos += 1
    return items, pos + 1


def _parse_atom(tokens: list[str], pos: int, text: str) -> tuple[Type, int]:
    if pos >= len(tokens):
        raise TypeParseError(f"type {text!r} ends early")
    tok = tokens[pos]
    if tok == "(":
        elems, pos = _parse_list_of_types(tokens, pos, text)
        return TupleType(tuple(elems)), pos
    if tok == "Tensor" or tok in _NAME_TO_DTYPE:
        # ``Tensor(2, 3)`` is how ``TensorType(None, (2, 3))`` prints: a shape without a dtype.
        dtype = _NAME_TO_DTYPE.get(tok)
        pos += 1
        if pos < len(tokens) and tokens[pos] == "(":
            dims: list[int | None] = []
            pos += 1
            while tokens[pos] != ")":
                dims.append(None if tokens[pos] == "*" else int(tokens[pos]))
                pos += 1
                if tokens[pos] == ",":
                    pos += 1
            return TensorType(dtype, tuple(dims)), pos + 1
        return TensorType(dtype, None), pos
    if tok in ("Dict", "Union", "Future", "Opaque"):
        if tok == "Opaque":
            # Opaque(<spelling>): everything up to the matching parenthesis.
            depth, end = 0, pos + 1
            for end in range(pos + 1, len(tokens)):
                depth += tokens[end] == "("
                depth -= tokens[end] == ")"
                if depth == 0:
                    break
            return OpaqueType(" ".join(tokens[pos + 2:end])), end + 1
        args, pos = _parse_list_of_types(tokens, pos + 1, text)
        if tok == "Dict":
            return DictType(args[0], args[1]), pos
        if tok == "Future":
            return FutureType(args[0]), pos
        return UnionType(tuple(args)), pos
    if tok in _SIMPLE:
        return _SIMPLE[tok], pos + 1
    if tok == "number":
        return Number, pos + 1
    if tok == "string":
        return Str, pos + 1
    if tok[0].isalpha() or tok[0] == "_":
        return ClassType(tok), pos + 1
    raise TypeParseError(f"unexpected {tok!r} in type {text!r}")


# --------------------------------------------------------------------------- torch._C types


def from_torch(t: torch._C.Type) -> Type:
    """Convert a TorchScript type to an IR type."""
    kind = t.kind()
    if kind == "TensorType":
        dtype = t.dtype()
        sizes = t.varyingSizes() if hasattr(t, "varyingSizes") else None
        shape = tuple(sizes) if sizes is not None else None
        return TensorType(dtype, shape)
    simple = {
        "IntType": Int, "FloatType": Float, "BoolType": Bool, "StringType": Str,
        "NoneType": NoneT, "DeviceObjType": Device, "NumberType": Number,
        "ComplexType": Complex, "LayoutType": Layout, "ScalarTypeType": ScalarTypeT,
        "MemoryFormatType": MemoryFormat, "GeneratorType": Generator, "AnyType": Any,
    }.get(kind)
    if simple is not None:
        return simple
    if kind == "ListType":
        return ListType(from_torch(t.getElementType()))
    if kind == "TupleType":
        return TupleType(tuple(from_torch(e) for e in t.elements()))
    if kind == "DictType":
        return DictType(from_torch(t.getKeyType()), from_torch(t.getValueType()))
    if kind == "OptionalType":
        return OptionalType(from_torch(t.getElementType()))
    if kind == "FutureType":
        return FutureType(from_torch(t.getElementType()))
    if kind == "UnionType":
        return UnionType(tuple(from_torch(c) for c in t.containedTypes()))
    if kind in ("ClassType", "InterfaceType", "EnumType"):
        return ClassType(str(t))
    return OpaqueType(str(t))
