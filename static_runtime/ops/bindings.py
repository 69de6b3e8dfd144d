"""The fastest Python binding for a node's operator, proven to run the same overload.

Calling an ATen operator through its ``torch.ops`` overload object costs a Python-level
``OpOverload.__call__`` and a boxed call: about 3.6 µs for a small ``addmm.out``, against
2.1 µs through its Python binding, ``torch.addmm`` (``torch._C._VariableFunctions.addmm``).
But a binding serves every overload of a name and picks one from the Python values it is
given, so using it is only right when the overload it picks is provably the node's. ``bind``
proves it at preparation time, per node:

1. **Candidates.** The generated bindings of the operator's name, functions first
   (``torch._C._VariableFunctions``, ``_nn``, ``_fft``, ``_linalg``, ``_special``), then the
   Tensor method (``torch._C.TensorBase.<name>``, called as ``TensorBase.name(self, ...)``;
   never for ``out=``). Hand-written bindings (``size``, ``to``, ``contiguous``...: torchgen's
   skip list) and dunder bindings (which turn a TypeError into NotImplemented) are never
   candidates. The node's signature in the binding is the one that dispatches to the node's
   overload (with ``out=``: to its ``.out`` overload).
2. **The call.** Arguments go positionally where the signature has them positional, else by
   keyword. Constants are specialised: a constant equal to the parameter's default, or None
   for a parameter that has a default and accepts None (the parser then holds exactly what it
   holds when the argument is left out), is left out when it is keyword-only or among the
   trailing positional ones; ``ScalarType``, ``Layout`` and ``MemoryFormat`` constants, ints
   in TorchScript graphs, become ``torch.dtype``/``layout``/``memory_format`` objects. Such an
   argument that is not a constant keeps the node on ``torch.ops``.
3. **The proof.** ``python_signatures.first_fit`` replays the binding's argument parser on
   the kinds of values the call passes (from the schema's types, narrowed by the IR's and by
   constant values): the node's signature must be the first that surely fits, and every
   earlier one must surely not (a 0-dim tensor may fit a ``Scalar`` parameter: such a
   doubt keeps ``torch.ops``). One exception is proven by ATen's source rather than by the
   parser: the Python bindings have no ``add.Scalar``, ``sub.Scalar``, ``mul.Scalar``,
   ``div.Scalar`` (torchgen's ``SKIP_PYTHON_BINDINGS_SIGNATURES``) and take a number as a
   wrapped-number tensor for the ``.Tensor`` overload instead, which is how ATen itself
   defines those ``.Scalar`` overloads (``at::add(self, wrapped_scalar_tensor(other),
   alpha)`` in ``BinaryOps.cpp``; likewise ``div`` with a rounding mode and the in-place
   forms).
4. **The result.** Tensors, tuples of tensors (named tuples, which are tuples), bool, int
   and float come back as ``torch.ops`` returns them; a ``Tensor[]`` comes back as a tuple
   and is made a list. Any other return type keeps ``torch.ops``.

The implementation is the binding itself when the node's inputs are its arguments as they
are, otherwise a small generated function taking the node's inputs (``fn(*inputs)``, and
``out_fn(out, *inputs)``), with the constants it dropped or converted baked in.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from static_runtime.ir import schema as S
from static_runtime.ir import types as T
from static_runtime.ir.graph import Node
from static_runtime.ops import python_signatures as P
from static_runtime.ops import signature_lists
from static_runtime.ops.binding_calls import (
    ABSENT,
    DROP_ALL,
    DROP_KEYWORDS,
    DROP_NONE,
    Arg,
    call_of,
    generate,
    make,
    spell,
)
from static_runtime.ops.enums import ENUM_TYPES, enum_table, int_enum
from static_runtime.ops.python_signatures import Kind, Kinds

#: The modules holding each namespace's bindings, and how labels spell them.
_MODULES: dict[str, tuple[Any, str]] = {
    "torch": (torch._C._VariableFunctions, "torch._C._VariableFunctions"),
    "nn": (torch._C._nn, "torch._C._nn"),
    "fft": (torch._C._fft, "torch._C._fft"),
    "linalg": (torch._C._linalg, "torch._C._linalg"),
    "special": (torch._C._special, "torch._C._special"),
    "method": (torch._C.TensorBase, "torch._C.TensorBase"),
}


def _spelling(ns: str, name: str, binding: Any) -> str:
    """How a label names a binding: ``torch.add`` and ``Tensor.view`` where those names are
    the binding itself, else its full name (``torch.split`` is a Python wrapper, for one)."""
    if ns == "torch" and getattr(torch, name, None) is binding:
        return f"torch.{name}"
    if ns == "method" and getattr(torch.Tensor, name, None) is binding:
        return f"Tensor.{name}"
    return f"{_MODULES[ns][1]}.{name}"


#: ``.Scalar`` overloads the bindings run as their ``.Tensor`` overload on a wrapped number,
#: which is what ATen's own definition of them does (see the module docstring).
SCALAR_AS_TENSOR = {
    "add.Scalar": "add.Tensor", "sub.Scalar": "sub.Tensor", "mul.Scalar": "mul.Tensor",
    "div.Scalar": "div.Tensor", "div.Scalar_mode": "div.Tensor_mode",
    "add_.Scalar": "add_.Tensor", "sub_.Scalar": "sub_.Tensor", "mul_.Scalar": "mul_.Tensor",
    "div_.Scalar": "div_.Tensor", "div_.Scalar_mode": "div_.Tensor_mode",
}


@dataclass(frozen=True)
class Spread:
    """A form of a node's call that takes the elements of one of its int-list inputs (a list
    built in the graph, of ``count`` elements) as separate arguments, in its place: ``fn`` is
    called with the first ``takes`` of the node's inputs so spread (the rest are constants
    it leaves out). PyTorch's parser reads ``x.view(a, b, c)`` as ``x.view([a, b, c])`` for a
    signature whose one positional parameter is an unsized int list, and a list parsed from
    the call's own argument tuple costs less than one passed in: 0.5 against 1.0 µs for a
    small ``view``."""

    index: int
    count: int
    fn: Callable[..., Any]
    takes: int
    label: str


def bind(node: Node, *, out_overload: str | None = None) -> tuple[Callable[..., Any] | None, str]:
    """A callable running ``node`` through a Python binding, or ``(None, why not)``.

    With ``out_overload`` (the ``.out`` overload's name, e.g. ``out``), the callable is an out
    variant: ``fn(out, *inputs)`` passes ``out=``."""
    return _bind(node, out_overload=out_overload)


def bind_spread(node: Node, index: int, count: int) -> Spread | None:
    """The ``Spread`` form of ``node`` for its input ``index``, an int list of ``count``
    (at least one) elements, where a binding provably runs the node's overload that way."""
    if count < 1:
        return None
    found = _bind(node, spread=(index, count))
    return found[0] if isinstance(found[0], Spread) else None


def _bind(node: Node, *, out_overload: str | None = None,
          spread: tuple[int, int] | None = None) -> tuple[Any, str]:
    if node.schema is None:
        return None, "no schema"
    info = S.parse(node.schema)
    if info.namespace != "aten" or info.is_vararg or info.is_generic():
        return None, "not an ATen operator with concrete types"
    if len(node.inputs) != len(info.arguments):
        return None, "the node does not pass every argument"
    returns = _returns(node.schema)
    if returns is None:
        return None, "no binding returns its return type"
    name = info.base_name
    if P.is_dunder(name):
        return None, "dunder bindings turn a TypeError into NotImplemented"
    args, why = _arguments(node, info)
    if args is None:
        return None, why
    overload = info.overload or ""
    if out_overload is None:
        own = f"{name}.{overload}" if overload else name
        targets = {own, SCALAR_AS_TENSOR.get(own, own)}
    else:
        targets = {f"{name}.{out_overload}"}
    namespaces = [ns for ns in signature_lists.NAMESPACES if ns != "method"]
    if out_overload is None:
        # The Tensor method first when no argument is a list: its parser takes ``self`` as
        # the receiver and costs less (``x.transpose(1, 2)`` 0.6 against ``torch.transpose``
        # 0.75 µs); with an int list argument it costs more (``reshape``, ``permute``).
        lists = P.LISTS | {Kind.EMPTY_LIST}
        if any(a.kinds & lists for a in args):
            namespaces.append("method")
        else:
            namespaces.insert(0, "method")
    if spread is not None and not (0 <= spread[0] < len(args)
                                   and Kind.INT_LIST in args[spread[0]].kinds
                                   and not args[spread[0]].is_constant):
        return None, "no int-list input to spread"
    for ns in namespaces:
        sigs = signature_lists.signatures(ns, name)
        binding = getattr(_MODULES[ns][0], name, None)
        if not sigs or binding is None:
            continue
        for sig in sigs:
            # (a node may itself be an ``.out`` overload, its ``out`` one of its inputs)
            hits = {sig.out} if out_overload is not None else {sig.base, sig.out}
            if sig.deprecated or not hits & targets:
                continue
            # Leaving constants out may make an earlier signature fit too (``std(x)`` for
            # ``std(x, True)``): then leave fewer out.
            for drop in (DROP_ALL, DROP_KEYWORDS, DROP_NONE):
                call = call_of(sig, args, ns == "method", out_overload is not None, drop)
                if call is None:
                    break
                receiver, positional, keywords = call
                pos_kinds = [a.kinds for a in positional]
                kw_kinds = {k: a.kinds for k, a in keywords.items()}
                if out_overload is not None:
                    kw_kinds["out"] = frozenset({Kind.TENSOR})
                if spread is not None:
                    made = _spread(sig, sigs, binding, _spelling(ns, name, binding), node,
                                   spread, receiver, positional, keywords, kw_kinds, returns)
                    if made is not None:
                        return made, ""
                    continue
                if P.first_fit(sigs, pos_kinds, kw_kinds) is sig:
                    return make(binding, _spelling(ns, name, binding), len(node.inputs), receiver,
                                positional, keywords, out_overload is not None, returns), ""
    return None, "no Python binding provably runs this overload"


def _spread(sig: P.PySignature, sigs: tuple[P.PySignature, ...], binding: Callable[..., Any],
            spelling: str, node: Node, spread: tuple[int, int], receiver: Arg | None,
            positional: list[Arg], keywords: dict[str, Arg], kw_kinds: dict[str, Kinds],
            returns: str) -> Spread | None:
    """The call with the list ``positional[-1]`` spread, if the parser provably reads it as
    the same call: the signature's one positional parameter is an unsized int list (the
    parser's varargs rule), and with that many ints the signature is still the first fit."""
    index, count = spread
    params = [p for p in sig.params if not p.kw_only]
    if (not positional or positional[-1].index != index or len(positional) != 1
            or len(params) != 1 or params[0].type != "int_list" or params[0].size):
        return None
    if P.first_fit(sigs, [frozenset({Kind.INT})] * count, kw_kinds) is not sig:
        return None

    def shifted(a: Arg) -> Arg:
        return a if a.index < index else Arg(a.index + count - 1, a.name, a.kinds, a.constant,
                                              a.converted, a.enum)

    elements = [Arg(index + k, f"{positional[-1].name}{k}", frozenset({Kind.INT}))
                for k in range(count)]
    order = ([shifted(receiver)] if receiver is not None else []) + elements
    keywords = {k: shifted(a) for k, a in keywords.items()}
    n_inputs = len(node.inputs) + count - 1
    shown = [f"{positional[-1].name}..." if a is elements[0] else spell(a)
             for a in order if a not in elements[1:]]
    label = f"{spelling}({', '.join(shown + [f'{k}={spell(a)}' for k, a in keywords.items()])})"
    if (not keywords and not returns and not any(a.converted or a.enum for a in order)
            and [a.index for a in order] == list(range(len(order)))):
        return Spread(index, count, binding, len(order), label)
    fn = generate(binding, spelling, n_inputs, order, keywords, False, returns)
    return Spread(index, count, fn, n_inputs, label)


# --------------------------------------------------------------------------- the node's side


def _returns(schema: str) -> str | None:
    """How the binding's result becomes ``torch.ops``' result: "" as it is, "list" for a
    tuple of tensors that must be a list, None if no equal form is known."""
    rets = [str(r.type) for r in torch._C.parse_schema(schema).returns]
    if all(r == "Tensor" for r in rets):
        return ""
    if rets == ["List[Tensor]"]:
        return "list"
    if len(rets) == 1 and rets[0] in ("int", "float", "bool"):
        return ""
    return None


def _arguments(node: Node, info: S.SchemaInfo) -> tuple[list[Arg] | None, str]:
    args = []
    for i, (a, v) in enumerate(zip(info.arguments, node.inputs, strict=True)):
        # (a ``prim::Constant`` without a value is None)
        value = v.node.attrs.get("value") if v.node.kind == "prim::Constant" else ABSENT
        enum_kind = ENUM_TYPES.get(a.real_type.removeprefix("Optional[").removesuffix("]"))
        if enum_kind is not None:
            if value is ABSENT:
                if not enum_table(enum_kind) or not int_enum(v.type):
                    return None, f"{a.real_type} argument '{a.name}' is not a constant"
                kinds = frozenset({enum_kind})
                if isinstance(v.type, T.OptionalType):
                    kinds |= {Kind.NONE}
                args.append(Arg(i, a.name, kinds, enum=enum_kind))
                continue
            converted = _enum_value(enum_kind, value)
            if converted is ABSENT:
                return None, f"constant {a.name}={value!r} has no Python equivalent"
            args.append(Arg(i, a.name, _kinds_of_value(converted), converted,
                            converted is not value))
        elif value is not ABSENT:
            args.append(Arg(i, a.name, _kinds_of_value(value), value))
        else:
            args.append(Arg(i, a.name, _narrow(_kinds_of_type(a.real_type), v.type)))
    return args, ""


def _kinds_of_type(t: str) -> Kinds:
    if t.startswith("Optional[") and t.endswith("]"):
        return _kinds_of_type(t[len("Optional["):-1]) | {Kind.NONE}
    simple = {"Tensor": Kind.TENSOR, "int": Kind.INT, "SymInt": Kind.INT, "float": Kind.FLOAT,
              "bool": Kind.BOOL, "complex": Kind.COMPLEX, "str": Kind.STR,
              "Device": Kind.DEVICE, "Generator": Kind.GENERATOR, "List[int]": Kind.INT_LIST,
              "List[SymInt]": Kind.INT_LIST, "List[float]": Kind.FLOAT_LIST,
              "List[bool]": Kind.BOOL_LIST, "List[str]": Kind.STR_LIST,
              "List[Tensor]": Kind.TENSOR_LIST}
    if t in simple:
        return frozenset({simple[t]})
    if t in ("number", "Scalar"):
        return P.NUMBERS
    if t == "List[Optional[Tensor]]":
        return frozenset({Kind.OPTIONAL_TENSOR_LIST, Kind.TENSOR_LIST})
    return frozenset({Kind.OTHER})


def _narrow(kinds: Kinds, t: T.Type) -> Kinds:
    """What the IR's type of the value says beyond the schema's."""
    if t is T.NoneT and Kind.NONE in kinds:
        return frozenset({Kind.NONE})
    if not isinstance(t, (T.OptionalType, T.UnionType)) and t is not T.Any and kinds != {Kind.NONE}:
        kinds = kinds - {Kind.NONE}
    exact = {T.Int: Kind.INT, T.Float: Kind.FLOAT, T.Bool: Kind.BOOL}.get(t)
    if exact is not None and exact in kinds:
        return frozenset({exact})
    return kinds


def _kinds_of_value(value: Any) -> Kinds:
    return frozenset({_kind_of_value(value)})


def _kind_of_value(value: Any) -> Kind:
    simple = [(bool, Kind.BOOL), (int, Kind.INT), (float, Kind.FLOAT), (complex, Kind.COMPLEX),
              (str, Kind.STR), (torch.Tensor, Kind.TENSOR), (torch.device, Kind.DEVICE),
              (torch.dtype, Kind.DTYPE), (torch.layout, Kind.LAYOUT),
              (torch.memory_format, Kind.MEMORY_FORMAT), (torch.Generator, Kind.GENERATOR)]
    if value is None:
        return Kind.NONE
    for cls, kind in simple:
        if isinstance(value, cls):
            return kind
    if isinstance(value, (list, tuple)):
        if not value:
            return Kind.EMPTY_LIST
        kinds = {_kind_of_value(x) for x in value}
        lists = {Kind.BOOL: Kind.BOOL_LIST, Kind.INT: Kind.INT_LIST, Kind.FLOAT: Kind.FLOAT_LIST,
                 Kind.STR: Kind.STR_LIST, Kind.TENSOR: Kind.TENSOR_LIST}
        if len(kinds) == 1 and next(iter(kinds)) in lists:
            return lists[next(iter(kinds))]
        if kinds == {Kind.TENSOR, Kind.NONE}:
            return Kind.OPTIONAL_TENSOR_LIST
    return Kind.OTHER


def _enum_value(kind: Kind, value: Any) -> Any:
    """A TorchScript ``ScalarType``/``Layout``/``MemoryFormat`` constant as the Python object
    the bindings take (None stays None), or ``ABSENT`` if there is none."""
    if value is None or isinstance(value, (torch.dtype, torch.layout, torch.memory_format)):
        return value
    if not isinstance(value, int) or isinstance(value, bool):
        return ABSENT
    return enum_table(kind).get(value, ABSENT)
