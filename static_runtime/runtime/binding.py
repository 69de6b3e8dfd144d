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
        if type(self).bind is Binder.bind:
            # The common call compiled (an instance attribute, so ``binder.bind(args,
            # kwargs)`` calls it directly): every argument by position, each of exactly the
            # type the signature names; anything else takes the general ``bind``.
            self.bind = _fast_binder(self.types, self._checks, Binder.bind.__get__(self))

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

#: Types whose values a generated binder accepts by ``type(x) is ...``: the checker accepts
#: exactly those unchanged (a subclass, an int for a float... take the general path).
_EXACT = {"Tensor": torch.Tensor, "int": int, "float": float, "bool": bool, "str": str}


def _fast_binder(types: list[T.Type], checks: list, general):
    n = len(types)
    params = [f"a{i}" for i in range(n)]
    values = list(params)
    tests, namespace = [], {"general": general, "tensor_types": frozenset({torch.Tensor})}
    for i, (t, check) in enumerate(zip(types, checks)):
        exact = _EXACT.get("Tensor" if isinstance(t, T.TensorType) else str(t))
        if exact is not None:
            namespace[f"t{i}"] = exact
            tests.append(f"type(a{i}) is t{i}")
        elif isinstance(t, T.ListType) and isinstance(t.elem, T.TensorType):
            # a list of tensors: copied, as the general checker does (the graph may write it)
            tests.append(f"type(a{i}) is list and {{*map(type, a{i})}} <= tensor_types")
            values[i] = f"list(a{i})"
        elif check is not None:
            namespace[f"c{i}"] = check
            tests.append(f"c{i}(a{i}) is a{i}")
    unpack = f"        {', '.join(params)}, = args\n" if n else ""
    cond = " and ".join(tests) or "True"
    src = (f"def bind(args, kwargs):\n"
           f"    if not kwargs and len(args) == {n}:\n"
           f"{unpack}"
           f"        if {cond}:\n"
           f"            return [{', '.join(values)}]\n"
           f"    return general(args, kwargs)\n")
    exec(compile(src, "<static_runtime binder>", "exec"), namespace)  # noqa: S102
    return namespace["bind"]


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
    (tuples, lists, dicts, keyword arguments) are flattened against the program's input
    ``TreeSpec``, then checked against what the program was exported for (sizes that were
    specialised, symbolic sizes within their range and equal where they share a symbol,
    non-tensor inputs that were specialised) — ``torch.export``'s own input check, compiled
    into flat lists once so that a call pays a few comparisons per input."""

    def __init__(self, graph: Graph):
        super().__init__(graph)
        sig: ExportSignature = graph.signature
        self.in_spec = sig.in_spec
        self.ranges = sig.ranges
        self._flatten = None if sig.flat_positional else _flattener(sig.in_spec)
        self._kw_order = _kwarg_names(sig.in_spec)
        # One record per checked input, so a call reads each tensor's shape once:
        # (input, ndim or None for a non-tensor, ((dim, size), ...) specialised sizes,
        #  ((dim, lo, hi, k), ...) first sight of symbol k, ((dim, k), ...) later sights of
        #  symbol k, which must agree, guard). ``dim`` is None for a symbolic int input.
        first: dict[str, int] = {}
        self._where: list[int] = []  # symbol k -> the input it is first seen in
        self._guards: list[tuple] = []
        self._values: list[tuple] = []  # (input, value, guard): specialised non-tensors
        for i, g in enumerate(sig.guards):
            if g.is_tensor:
                static = tuple((d, w) for d, w in enumerate(g.dims) if type(w) is int)
                places = [(d, w) for d, w in enumerate(g.dims) if type(w) is str and w != "?"]
            elif g.specialised:
                self._values.append((i, g.value, g))
                continue
            else:
                static, places = (), [(None, g.symbol)] if g.symbol else []
            ranges, equal = [], []
            for d, name in places:
                if name in first:
                    equal.append((d, first[name]))
                else:
                    first[name] = len(self._where)
                    self._where.append(i)
                    ranges.append((d, *self.ranges.get(name, (0, float("inf"))), first[name]))
            if g.is_tensor or ranges or equal:
                self._guards.append((i, len(g.dims) if g.is_tensor else None, static,
                                     tuple(ranges), tuple(equal), g))
        self._fast = _compile_fast_check(self)
        if self._fast is not None and self._flatten is None:
            # The whole bind compiled for the common case (a flat tuple of tensors and ints):
            # an instance attribute, so ``binder.bind(args, kwargs)`` calls it directly.
            self.bind = self._compile_fast_bind()

    def bind(self, args: tuple, kwargs: dict[str, Any]) -> list[Any]:
        if self._flatten is not None:
            if kwargs and self._kw_order is not None and list(kwargs) != self._kw_order \
                    and set(kwargs) == set(self._kw_order):
                kwargs = {k: kwargs[k] for k in self._kw_order}
            leaves: list[Any] = []
            if self._fast is not None and self._flatten((args, kwargs), leaves) \
                    and len(leaves) == self.n and self._fast(*leaves):
                return leaves
            leaves.clear()
            if not self._flatten((args, kwargs), leaves):
                spec = pytree.tree_flatten((tuple(args), kwargs))[1]
                raise ArgumentError(
                    f"the arguments are structured as {_spec_text(spec)}, but the program "
                    f"was exported for {_spec_text(self.in_spec)}")
            values = super().bind(tuple(leaves), {})
        else:
            values = super().bind(args, kwargs)
        self._check(values)
        return values

    def _check(self, values: list[Any]) -> None:
        seen = [0] * len(self._where)
        for i, ndim, static, ranges, equal, g in self._guards:
            x = values[i]
            shape = x.shape if ndim is not None else None
            if ndim is not None and len(shape) != ndim:
                self._refuse(g, f"{ndim} dimensions {_dims_text(g.dims)}", _got(x))
            for d, want in static:
                if shape[d] != want:
                    self._refuse(g, f"shape {_dims_text(g.dims)}", _got(x))
            for d, lo, hi, k in ranges:
                size = x if d is None else shape[d]
                if not lo <= size <= hi:
                    name = g.symbol if d is None else g.dims[d]
                    self._refuse(g, f"{_dims_text(g.dims) if ndim is not None else 'an int'} "
                                 f"with {_range_text(name, lo, hi)}", _got(x))
                seen[k] = size
            for d, k in equal:
                size = x if d is None else shape[d]
                if size != seen[k]:
                    name = g.symbol if d is None else g.dims[d]
                    self._refuse(g, f"{_dims_text(g.dims) if ndim is not None else 'an int'}, "
                                 f"where {name} = {seen[k]} from "
                                 f"{self.binder_path(self._where[k])}", _got(x))
        for i, value, g in self._values:
            x = values[i]
            if type(x) is not type(value) or x != value:
                self._refuse(g, f"{value!r} (specialised when exported)", repr(x))

    def _compile_fast_bind(self):
        """``bind`` for a program of flat positional inputs: the inputs themselves when the
        generated check accepts them, else the general bind (which converts, or raises the
        error that names what was wrong)."""
        general = ExportBinder.bind.__get__(self)
        fast, n = self._fast, self.n

        def bind(args: tuple, kwargs: dict[str, Any]) -> list[Any]:
            if not kwargs and len(args) == n and fast(*args):
                return list(args)
            return general(args, kwargs)

        return bind

    def binder_path(self, i: int) -> str:
        return self.graph.signature.guards[i].path

    def _refuse(self, guard: InputGuard, expected: str, got: str) -> None:
        raise ArgumentError(
            f"argument {guard.path} expected {expected}, got {got}: the program was exported "
            "for these; export with dynamic_shapes= for sizes that vary")


def _compile_fast_check(binder: ExportBinder):
    """A generated function ``check(x0, x1, ...) -> bool``: True when the flat inputs pass
    every check of ``Binder.bind`` and ``ExportBinder._check`` with nothing to convert, so a
    call that passes costs a few comparisons with no interpretation of the guard records.
    False sends the call to the general path, which converts (an int for a float) or raises
    the error naming the input. None if an input's type has no compiled check (then every
    call takes the general path)."""
    names = [f"x{i}" for i in range(binder.n)]
    lines = [f"def check({', '.join(names)}):"]
    env: dict[str, Any] = {"Tensor": torch.Tensor}
    for x, t in zip(names, binder.types):
        if isinstance(t, T.TensorType):
            lines.append(f"    if not isinstance({x}, Tensor): return False")
        elif t is T.Int:
            lines.append(f"    if type({x}) is not int: return False")
        else:
            return None
    for i, ndim, static, ranges, equal, _ in binder._guards:
        x = names[i]
        if ndim is not None:
            lines.append(f"    s{i} = {x}.shape")
            lines.append(f"    if len(s{i}) != {ndim}: return False")
        for d, want in static:
            lines.append(f"    if s{i}[{d}] != {int(want)}: return False")
        for d, lo, hi, k in ranges:
            lines.append(f"    k{k} = {x if d is None else f's{i}[{d}]'}")
            lines.append(f"    if k{k} < {int(lo)}: return False")
            if hi != float("inf"):
                lines.append(f"    if k{k} > {int(hi)}: return False")
        for d, k in equal:
            lines.append(f"    if {x if d is None else f's{i}[{d}]'} != k{k}: return False")
    for j, (i, value, _) in enumerate(binder._values):
        env[f"v{j}"], env[f"t{j}"] = value, type(value)
        lines.append(f"    if type({names[i]}) is not t{j} or {names[i]} != v{j}: return False")
    lines.append("    return True")
    source = "\n".join(lines) + "\n"
    exec(compile(source, "<static_runtime export input check>", "exec"), env)  # noqa: S102  (our own generated code)
    check = env["check"]
    check.source = source
    return check


def _got(x: Any) -> str:
    return f"shape {tuple(x.shape)}" if isinstance(x, torch.Tensor) else repr(x)


def _range_text(name: str, lo: float, hi: float) -> str:
    return f"{lo} <= {name} <= {hi if hi != float('inf') else 'inf'}"


def _flattener(spec: Any):
    """A function ``f(tree, leaves) -> bool`` appending ``tree``'s leaves in ``spec``'s order,
    False if ``tree`` has another structure. Tuples, lists and dicts are walked directly
    (``pytree.tree_flatten`` costs microseconds per node); other node types go through pytree."""
    if spec.type is tuple and spec.num_children == 2 and spec.child(1).type is dict \
            and spec.child(1).num_children == 0 and spec.child(0).type is tuple and all(
                c.is_leaf() or c.type in (list, tuple) and all(e.is_leaf() for e in c.children())
                for c in spec.child(0).children()):
        # Positional arguments that are leaves or flat lists/tuples of leaves (DLRM's
        # ``indices``): one loop, no recursion.
        plan = [(None, 1) if c.is_leaf() else (c.type, c.num_children)
                for c in spec.child(0).children()]
        n_args = len(plan)

        def positional(tree, out):
            args, kwargs = tree
            if kwargs or len(args) != n_args:
                return False
            for (kind, n), a in zip(plan, args):
                if kind is None:
                    out.append(a)
                elif type(a) is kind and len(a) == n:
                    out.extend(a)
                else:
                    return False
            return True

        return positional
    if spec.is_leaf():
        def leaf(x, out):
            out.append(x)
            return True

        return leaf
    children = [_flattener(c) for c in spec.children()]
    n = len(children)
    if spec.type in (tuple, list):
        kind = spec.type

        def seq(x, out):
            if type(x) is not kind or len(x) != n:
                return False
            return all(f(e, out) for f, e in zip(children, x))

        return seq
    if spec.type is dict:
        keys = list(spec.context)

        def mapping(x, out):
            # Keys are matched by name: a dict given in another order is the same structure.
            if type(x) is not dict or len(x) != n or any(k not in x for k in keys):
                return False
            return all(f(x[k], out) for f, k in zip(children, keys))

        return mapping

    def other(x, out):
        leaves, got = pytree.tree_flatten(x)
        if got != spec:
            return False
        out.extend(leaves)
        return True

    return other


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
