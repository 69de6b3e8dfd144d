"""Binding a call's ``*args, **kwargs`` to the graph's inputs, with errors that say what
the signature is, what was expected and what came."""

from __future__ import annotations

from typing import Any

import torch
import torch.utils._pytree as pytree

from static_runtime.frontend.export import ExportSignature, InputGuard
from static_runtime.ir import types as T
from static_runtime.ir.graph import Graph, Signature


class ArgumentError(TypeError):
    """A call's arguments do not match the model's signature."""


def describe_signature(graph: Graph) -> str:
    sig = graph.signature
    parts = []
    for arg, v in zip(sig.arguments, graph.inputs):
        text = f"{arg.name}: {v.type}"
        if arg.has_default:
            text += f" = {arg.default!r}"
        parts.append(text)
    return f"forward({', '.join(parts)})"


class Binder:
    """Binds and checks arguments for one graph; built once, used on every call."""

    def __init__(self, graph: Graph):
        self.graph = graph
        sig = graph.signature or Signature([])
        self.names = [a.name for a in sig.arguments]
        self.arguments = sig.arguments
        self.types = [v.type for v in graph.inputs]
        if len(self.names) != len(self.types):
            raise ValueError("graph signature and graph inputs disagree in number")
        self.n = len(self.types)
        self._checks = [_checker(t) for t in self.types]

    def bind(self, args: tuple, kwargs: dict[str, Any]) -> list[Any]:
        n = self.n
        if not kwargs and len(args) == n:
            values = list(args)
        else:
            values = self._bind_slow(args, kwargs)
        for i, (value, check) in enumerate(zip(values, self._checks)):
            if check is not None:
                converted = check(value)
                if converted is _BAD:
                    self._type_error(i, value)
                if converted is not value:
                    values[i] = converted
        return values

    def _bind_slow(self, args: tuple, kwargs: dict[str, Any]) -> list[Any]:
        if len(args) > self.n:
            raise ArgumentError(
                f"too many arguments: {describe_signature(self.graph)} takes {self.n}, "
                f"got {len(args)}")
        values = list(args)
        remaining = dict(kwargs)
        for name in self.names[: len(args)]:
            if name in remaining:
                raise ArgumentError(
                    f"argument {name!r} given both by position and by keyword; "
                    f"signature: {describe_signature(self.graph)}")
        for arg in self.arguments[len(args):]:
            if arg.name in remaining:
                values.append(remaining.pop(arg.name))
            elif arg.has_default:
                values.append(arg.default)
            else:
                raise ArgumentError(
                    f"missing argument {arg.name!r}; signature: {describe_signature(self.graph)}")
        if remaining:
            unknown = ", ".join(repr(k) for k in remaining)
            raise ArgumentError(
                f"unknown keyword argument(s) {unknown}; signature: "
                f"{describe_signature(self.graph)}")
        return values

    def _type_error(self, i: int, value: Any) -> None:
        raise ArgumentError(
            f"argument {self.names[i]!r} (position {i}) expected {self.types[i]}, got "
            f"{_describe(value)}; signature: {describe_signature(self.graph)}")


_BAD = object()


def _describe(value: Any) -> str:
    if isinstance(value, torch.Tensor):
        return f"Tensor(dtype={value.dtype}, shape={tuple(value.shape)})"
    return type(value).__name__


def _checker(t: T.Type):
    """A function returning the (possibly converted) value, or ``_BAD``; None: accept all."""
    if isinstance(t, T.TensorType):
        return lambda x: x if isinstance(x, torch.Tensor) else _BAD
    if t is T.Int:
        return lambda x: x if isinstance(x, int) and not isinstance(x, bool) else _BAD
    if t is T.Float:
        def float_check(x):
            if isinstance(x, float):
                return x
            if isinstance(x, int) and not isinstance(x, bool):
                return float(x)
            return _BAD

        return float_check
    if t is T.Bool:
        return lambda x: x if isinstance(x, bool) else _BAD
    if t is T.Str:
        return lambda x: x if isinstance(x, str) else _BAD
    if t is T.Number:
        return lambda x: x if isinstance(x, (int, float, bool, complex)) else _BAD
    if t is T.Device:
        def device_check(x):
            if isinstance(x, torch.device):
                return x
            if isinstance(x, str):
                try:
                    return torch.device(x)
                except RuntimeError:
                    return _BAD
            return _BAD

        return device_check
    if isinstance(t, T.OptionalType):
        inner = _checker(t.elem)
        if inner is None:
            return None
        return lambda x: None if x is None else inner(x)
    # Lists and dicts are copied on every call (nested ones too, through the element
    # checkers): the graph may write into them (append, setitem), and the caller's container
    # is never written to. The TorchScript interpreter copies them into IValues likewise.
    if isinstance(t, T.ListType):
        inner = _checker(t.elem)

        def list_check(x):
            if not isinstance(x, list):
                return _BAD
            if inner is None:
                return list(x)
            out = [inner(e) for e in x]
            return _BAD if any(e is _BAD for e in out) else out

        return list_check
    if isinstance(t, T.TupleType):
        inners = [_checker(e) for e in t.elems]

        def tuple_check(x):
            if not isinstance(x, tuple) or len(x) != len(inners):
                return _BAD
            out = tuple(e if c is None else c(e) for e, c in zip(x, inners))
            if any(e is _BAD for e in out):
                return _BAD
            return out if any(a is not b for a, b in zip(out, x)) else x

        return tuple_check
    if isinstance(t, T.DictType):
        key_check, value_check = _checker(t.key), _checker(t.value)

        def dict_check(x):
            if not isinstance(x, dict):
                return _BAD
            out = {}
            for k, v in x.items():
                k = k if key_check is None else key_check(k)
                v = v if value_check is None else value_check(v)
                if k is _BAD or v is _BAD:
                    return _BAD
                out[k] = v
            return out

        return dict_check
    return None


# --------------------------------------------------------------------------- torch.export


class ExportBinder(Binder):
    """Binds a call to an exported program's flat inputs: the user's nested arguments
    (tuples, lists, dicts, keyword arguments) are flattened by pytree against the program's
    input ``TreeSpec``, then checked against what the program was exported for (sizes that
    were specialised, symbolic sizes within their range and equal where they share a symbol,
    non-tensor inputs that were specialised) — ``torch.export``'s own input check."""

    def __init__(self, graph: Graph):
        super().__init__(graph)
        sig: ExportSignature = graph.signature
        self.in_spec = sig.in_spec
        self._flatten = not sig.flat_positional
        self._kw_order = _kwarg_names(sig.in_spec)
        self.ranges = sig.ranges
        self._tensor_guards = [(i, g) for i, g in enumerate(sig.guards)
                               if g.is_tensor and g.dims != ("?",) * len(g.dims)]
        self._value_guards = [(i, g) for i, g in enumerate(sig.guards)
                              if not g.is_tensor and (g.specialised or g.symbol)]

    def bind(self, args: tuple, kwargs: dict[str, Any]) -> list[Any]:
        if self._flatten:
            if self._kw_order is not None and set(kwargs) == set(self._kw_order):
                kwargs = {k: kwargs[k] for k in self._kw_order}
            leaves, spec = pytree.tree_flatten((tuple(args), kwargs))
            if spec != self.in_spec:
                raise ArgumentError(
                    f"the arguments are structured as {_spec_text(spec)}, but the program was "
                    f"exported for {_spec_text(self.in_spec)}")
            values = super().bind(tuple(leaves), {})
        else:
            values = super().bind(args, kwargs)
        self._check(values)
        return values

    def _check(self, values: list[Any]) -> None:
        symbols: dict[str, int] = {}
        for i, g in self._tensor_guards:
            shape = values[i].shape
            dims = g.dims
            if len(shape) != len(dims):
                self._refuse(g, f"{len(dims)} dimensions {_dims_text(dims)}",
                             f"shape {tuple(shape)}")
            for d, want in zip(shape, dims):
                if type(want) is int:
                    if d != want:
                        self._refuse(g, f"shape {_dims_text(dims)}", f"shape {tuple(shape)}")
                elif want != "?" and not self._bind_symbol(symbols, want, d):
                    self._refuse(g, f"shape {_dims_text(dims)} with {self._range_text(want)}"
                                 f"{self._bound_text(symbols, want)}", f"shape {tuple(shape)}")
        for i, g in self._value_guards:
            x = values[i]
            if g.specialised:
                if type(x) is not type(g.value) or x != g.value:
                    self._refuse(g, f"{g.value!r} (specialised when exported)", repr(x))
            elif not self._bind_symbol(symbols, g.symbol, x):
                self._refuse(g, f"an int with {self._range_text(g.symbol)}", repr(x))

    def _bind_symbol(self, symbols: dict[str, int], name: str, value: int) -> bool:
        seen = symbols.setdefault(name, value)
        if seen != value:
            return False
        lo, hi = self.ranges.get(name, (0, float("inf")))
        return lo <= value <= hi

    def _range_text(self, name: str) -> str:
        lo, hi = self.ranges.get(name, (0, float("inf")))
        return f"{lo} <= {name} <= {hi if hi != float('inf') else 'inf'}"

    @staticmethod
    def _bound_text(symbols: dict[str, int], name: str) -> str:
        return f" (and {name} = {symbols[name]} from an earlier input)" if name in symbols else ""

    def _refuse(self, guard: InputGuard, expected: str, got: str) -> None:
        raise ArgumentError(
            f"argument {guard.path} expected {expected}, got {got}: the program was exported "
            "for these; export with dynamic_shapes= for sizes that vary")


def make_binder(graph: Graph) -> Binder:
    """The binder for ``graph``'s signature."""
    if isinstance(graph.signature, ExportSignature):
        return ExportBinder(graph)
    return Binder(graph)


def _kwarg_names(in_spec: Any) -> list[str] | None:
    if in_spec is None or in_spec.num_children != 2:
        return None
    kwargs = in_spec.child(1)
    return list(kwargs.context) if kwargs.type is dict else None


def _dims_text(dims: tuple) -> str:
    return "(" + ", ".join(str(d) for d in dims) + ("," if len(dims) == 1 else "") + ")"


def _spec_text(spec: Any) -> str:
    """``(args, kwargs)`` with ``*`` for each leaf."""
    dummy = pytree.tree_unflatten(["*"] * spec.num_leaves, spec)
    return repr(dummy).replace("'*'", "*")
