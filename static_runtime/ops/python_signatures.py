"""What PyTorch's generated Python bindings accept, and which overload a call reaches.

PyTorch generates the Python bindings of ATen operators (``torch._C._VariableFunctions``,
``torch._C._nn``, ``_fft``, ``_linalg``, ``_special`` and the methods of
``torch._C.TensorBase``) from ``native_functions.yaml`` with ``torchgen``'s
``gen_python_functions``; the torch wheel ships both. One binding serves every overload of a
name: it holds an ordered list of signature strings, such as
``add(Tensor input, Tensor other, *, Scalar alpha=1, Tensor out=None)``, and its argument
parser (``torch/csrc/utils/python_arg_parser.cpp``) dispatches to the first signature the
call's arguments fit, deprecated signatures last.

This module reads those signature strings (``parse_signature``; ``signature_lists`` rebuilds
the lists with the same torchgen functions the build used), and replays the parser's choice
(``first_fit``) on *kinds* of values — a
tensor, an int, a list of ints — rather than on values: three-valued, because whether a
value fits can depend on more than its kind (a tensor is accepted as a ``Scalar`` when it is
0-dim). Without torchgen, nothing is known and every question is answered "no binding".
"""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass


class Kind(enum.Enum):
    """What a value passed to a binding is, as far as the argument parser can tell."""

    TENSOR = "Tensor"
    INT = "int"
    FLOAT = "float"
    BOOL = "bool"
    COMPLEX = "complex"
    NONE = "None"
    STR = "str"
    DEVICE = "device"
    GENERATOR = "Generator"
    DTYPE = "dtype"
    LAYOUT = "layout"
    MEMORY_FORMAT = "memory_format"
    EMPTY_LIST = "[]"
    INT_LIST = "int[]"
    FLOAT_LIST = "float[]"
    BOOL_LIST = "bool[]"
    STR_LIST = "str[]"
    TENSOR_LIST = "Tensor[]"
    OPTIONAL_TENSOR_LIST = "Tensor?[]"
    OTHER = "other"


Kinds = frozenset[Kind]
NUMBERS: Kinds = frozenset({Kind.INT, Kind.FLOAT, Kind.BOOL, Kind.COMPLEX})
#: Non-empty list kinds (``EMPTY_LIST`` is a list known to be empty; a list of unknown length
#: is one of these: it may still be empty at run time).
LISTS: Kinds = frozenset({Kind.INT_LIST, Kind.FLOAT_LIST, Kind.BOOL_LIST, Kind.STR_LIST,
                          Kind.TENSOR_LIST, Kind.OPTIONAL_TENSOR_LIST})


class Fit(enum.IntEnum):
    """Three-valued answer: surely not, depends on the values, surely yes."""

    NO = 0
    MAYBE = 1
    YES = 2


# The parser lets Python numbers bind to ``Tensor`` parameters of these names only
# (``should_allow_numbers_as_tensors`` in python_arg_parser.cpp).
NUMBERS_AS_TENSORS = frozenset({
    "add", "add_", "add_out", "div", "div_", "div_out", "divide", "divide_", "divide_out",
    "mul", "mul_", "mul_out", "multiply", "multiply_", "multiply_out", "sub", "sub_", "sub_out",
    "subtract", "subtract_", "subtract_out", "true_divide", "true_divide_", "true_divide_out",
    "to", "_to_copy", "copy_", "copy", "floor_divide", "floor_divide_", "floor_divide_out",
    "_conj"})

# Keyword aliases the parser also accepts (``numpy_compatibility_arg_names``).
_NUMPY_NAMES = {"dim": ("axis",), "keepdim": ("keepdims",), "input": ("x", "a", "x1"),
                "other": ("x2",)}

# C++ type spelling in a signature string → the parser's parameter type.
_PARAM_TYPES = {
    "Tensor": "tensor", "Scalar": "scalar", "int64_t": "int", "SymInt": "symint",
    "double": "double", "complex": "complex", "TensorList": "tensor_list",
    "c10::List<::std::optional<Tensor>>": "optional_tensor_list",
    "c10::List<std::optional<Tensor>>": "optional_tensor_list",
    "IntArrayRef": "int_list", "SymIntArrayRef": "int_list", "ArrayRef<double>": "float_list",
    "Generator": "generator", "bool": "bool", "ScalarType": "dtype", "Layout": "layout",
    "MemoryFormat": "memory_format", "Device": "device", "std::string": "str",
    "c10::string_view": "str", "Dimname": "dimname", "DimnameList": "dimname_list",
    "ScalarList": "scalar_list", "PyObject*": "object",
}


@dataclass(frozen=True)
class PyParam:
    """One parameter of a signature string, read the way ``FunctionParameter`` reads it."""

    type: str               # the parser's type ("tensor", "int_list"...), "unknown" if unread
    name: str
    kw_only: bool
    optional: bool          # has a default: may be left out
    allow_none: bool        # ``T?``, or a default of None: None is accepted for it
    size: int               # ``IntArrayRef[2]``: 2 (a single int is then accepted too)
    default: str | None     # the default as written, e.g. "1", "False", "None", "{1,1}"
    allow_numbers_as_tensors: bool

    @property
    def names(self) -> tuple[str, ...]:
        return (self.name, *_NUMPY_NAMES.get(self.name, ()))


@dataclass(frozen=True)
class PySignature:
    """One signature of a binding, with the overloads it dispatches to."""

    text: str
    name: str
    params: tuple[PyParam, ...]
    deprecated: bool
    #: the overload called without ``out=`` (``add.Tensor``), and with it (``add.out``)
    base: str
    out: str | None

    @property
    def max_pos_args(self) -> int:
        return sum(1 for p in self.params if not p.kw_only)

    def param(self, name: str) -> PyParam | None:
        return next((p for p in self.params if p.name == name), None)


def parse_signature(text: str, base: str, out: str | None) -> PySignature:
    """Read a signature string as ``FunctionSignature``'s constructor does."""
    head, _, rest = text.partition("(")
    body, _, tail = rest.rpartition(")")
    allow_numbers = head in NUMBERS_AS_TENSORS
    params: list[PyParam] = []
    kw_only = False
    for part in (body.split(", ") if body else []):
        if part == "*":
            kw_only = True
            continue
        type_str, _, name_str = part.partition(" ")
        allow_none = "?" in type_str
        type_str = type_str.replace("?", "")
        size = 0
        m = re.fullmatch(r"(.*)\[(\d+)\]", type_str)
        if m:
            type_str, size = m.group(1), int(m.group(2))
        name, eq, default = name_str.partition("=")
        params.append(PyParam(_PARAM_TYPES.get(type_str, "unknown"), name, kw_only, bool(eq),
                              allow_none or default == "None", size, default if eq else None,
                              allow_numbers))
    return PySignature(text, head, tuple(params), tail == "|deprecated", base, out)


# --------------------------------------------------------------------------- the replay


def _and(a: Fit, b: Fit) -> Fit:
    return Fit(min(a, b))


def _over(kinds: Kinds, fits: dict[Kind, Fit], other: Fit = Fit.NO) -> Fit:
    """Combine per-kind answers over every kind a value may have."""
    answers = {fits.get(k, other) if k is not Kind.OTHER else Fit.MAYBE for k in kinds}
    if answers == {Fit.YES}:
        return Fit.YES
    if answers == {Fit.NO}:
        return Fit.NO
    return Fit.MAYBE


def _check(p: PyParam, kinds: Kinds) -> Fit:
    """``FunctionParameter::check`` on a value of one of ``kinds`` (None excluded)."""
    Y, M, N = Fit.YES, Fit.MAYBE, Fit.NO
    t = p.type
    maybe_empty = {k: M for k in LISTS} | {Kind.EMPTY_LIST: Y}
    if t == "tensor":
        number = Y if p.allow_numbers_as_tensors else N
        return _over(kinds, {Kind.TENSOR: Y} | dict.fromkeys(NUMBERS, number))
    if t == "scalar":   # numbers, or a 0-dim tensor that does not require grad
        return _over(kinds, dict.fromkeys(NUMBERS, Y) | {Kind.TENSOR: M})
    if t == "complex":
        return _over(kinds, {Kind.COMPLEX: Y, Kind.FLOAT: Y, Kind.INT: Y, Kind.BOOL: M,
                             Kind.TENSOR: M})
    if t == "double":
        return _over(kinds, {Kind.FLOAT: Y, Kind.INT: Y, Kind.BOOL: M, Kind.TENSOR: M})
    if t in ("int", "symint"):  # a 0-dim integer tensor is accepted too
        return _over(kinds, {Kind.INT: Y, Kind.BOOL: M, Kind.TENSOR: M})
    if t == "int_list":         # the first element decides; a single int if sized
        return _over(kinds, maybe_empty | {Kind.INT_LIST: Y, Kind.TENSOR: M,
                                           Kind.INT: Y if p.size > 0 else N})
    if t == "float_list":
        return _over(kinds, maybe_empty | {Kind.FLOAT_LIST: Y, Kind.INT_LIST: Y})
    if t in ("tensor_list", "optional_tensor_list"):
        # A list holding something else makes the parser raise, not try the next signature;
        # None elements too, even for ``Tensor?[]`` (``torch.index_put(x, [None, i], v)``
        # raises "expected Tensor as element 0").
        return _over(kinds, maybe_empty | {Kind.TENSOR_LIST: Y})
    if t == "dimname":
        return _over(kinds, {Kind.STR: Y})
    if t == "dimname_list":
        return _over(kinds, maybe_empty | {Kind.STR_LIST: Y})
    if t == "scalar_list":
        return _over(kinds, maybe_empty)
    if t == "bool":
        return _over(kinds, {Kind.BOOL: Y, Kind.TENSOR: M})
    simple = {"generator": Kind.GENERATOR, "dtype": Kind.DTYPE, "layout": Kind.LAYOUT,
              "memory_format": Kind.MEMORY_FORMAT, "str": Kind.STR}
    if t in simple:
        return _over(kinds, {simple[t]: Y})
    if t == "device":
        return _over(kinds, {Kind.DEVICE: Y, Kind.STR: Y, Kind.INT: Y, Kind.BOOL: M})
    if t == "object":
        return Y
    return M


def _accepts(p: PyParam, kinds: Kinds) -> Fit:
    """Whether ``p`` takes a given value: None where allowed, else the type check."""
    if Kind.NONE in kinds:
        if p.allow_none or p.type in ("object", "dimname"):
            none_fit = Fit.YES
        else:
            none_fit = Fit.MAYBE if p.type == "unknown" else Fit.NO
        rest = kinds - {Kind.NONE}
        if not rest:
            return none_fit
        other = _check(p, rest)
        return none_fit if none_fit == other else Fit.MAYBE
    return _check(p, kinds)


def parse_fit(sig: PySignature, positional: list[Kinds], keywords: dict[str, Kinds]) -> Fit:
    """``FunctionSignature::parse``: does a call with values of these kinds fit ``sig``?"""
    nargs = len(positional)
    params = sig.params
    varargs = sig.max_pos_args == 1 and params and params[0].type == "int_list"
    if nargs > sig.max_pos_args and not varargs:
        return Fit.NO
    fit = Fit.YES
    arg_pos = 0
    used: set[str] = set()
    for p in params:
        if arg_pos < nargs:
            if p.kw_only:
                return Fit.NO
            kinds: Kinds | None = positional[arg_pos]
            is_kw = False
        else:
            key = next((n for n in p.names if n in keywords), None)
            kinds = keywords[key] if key is not None else None
            is_kw = True
            if key is not None:
                used.add(key)
        if kinds is None:
            if not p.optional:
                return Fit.NO
            continue
        answer = _accepts(p, kinds)
        if (answer is not Fit.YES and varargs and arg_pos == 0 and not is_kw and not p.size
                and all(k == {Kind.INT} for k in positional)):
            # ``view(2, 3)`` for ``view(int[] size)``: an int does not fit the list, so the
            # parser takes the whole argument tuple as the list (its first element is an
            # int; the others are read as ints, which they are).
            arg_pos = nargs
            continue
        if answer is not Fit.YES and varargs and arg_pos == 0 and not is_kw:
            # ``view(2, 3)``: the positional arguments may all be taken as one int list.
            # Calls we make pass lists as lists, so that reading is never the intended one:
            # where it may happen, the signature may fit in a way we cannot vouch for.
            first = _check(PyParam("int", "", False, False, False, 0, None, False),
                           positional[0])
            if first is not Fit.NO:
                return Fit.MAYBE
        fit = _and(fit, answer)
        if fit is Fit.NO:
            return Fit.NO
        if not is_kw:
            arg_pos += 1
    if set(keywords) - used:
        return Fit.NO
    return fit


def first_fit(sigs: tuple[PySignature, ...], positional: list[Kinds],
              keywords: dict[str, Kinds]) -> PySignature | None:
    """The signature the parser surely takes for such a call, or None when that depends on
    values (an earlier signature may fit) or none fits."""
    for sig in sigs:
        fit = parse_fit(sig, positional, keywords)
        if fit is Fit.YES:
            return sig
        if fit is Fit.MAYBE:
            return None
    return None


def is_dunder(name: str) -> bool:
    """``__and__`` and the like: their bindings turn a TypeError into NotImplemented."""
    return name.startswith("__") and name.endswith("__")
