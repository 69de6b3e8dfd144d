"""Constants, tuples, list construction and unpacking, identity tests, exceptions, casts."""

from __future__ import annotations

import builtins

import torch

from static_runtime.ir import types as T
from static_runtime.ir.graph import Node
from static_runtime.ir.values import ScriptObjectValue
from static_runtime.ops.registry import labelled, register_native


@register_native("prim::Constant")
def _constant(node: Node):
    value = node.attrs.get("value")
    return labelled("constant")(lambda: value)


@register_native("prim::ListConstruct")
def _list_construct(node: Node):
    return labelled("list(...)")(lambda *xs: list(xs))


@register_native("prim::TupleConstruct")
def _tuple_construct(node: Node):
    return labelled("tuple(...)")(lambda *xs: xs)


@register_native("prim::DictConstruct")
def _dict_construct(node: Node):
    def dict_construct(*kv):
        return dict(zip(kv[0::2], kv[1::2], strict=True))

    return dict_construct


def _unpack(n: int, what: str):
    """Unpacking into ``n`` values: the sequence itself, or its element when ``n`` is 1 (a
    node with one output stores what its function returns as that output)."""
    def unpack(seq):
        if len(seq) != n:
            raise ValueError(f"cannot unpack a {what} of {len(seq)} elements into {n} values")
        return seq[0] if n == 1 else seq

    return unpack


@register_native("prim::ListUnpack")
def _list_unpack(node: Node):
    return _unpack(len(node.outputs), "list")


@register_native("prim::TupleUnpack")
def _tuple_unpack(node: Node):
    if len(node.outputs) == 1:
        return lambda t: t[0]
    return lambda t: t


@register_native("prim::VarTupleUnpack")
def _var_tuple_unpack(node: Node):
    """Several tuples unpacked by one node (consecutive ``TupleUnpack``s merged)."""
    if len(node.outputs) == 1:
        return lambda *ts: ts[0][0]
    return lambda *ts: [x for t in ts for x in t]


@register_native("prim::TupleIndex")
def _tuple_index(node: Node):
    return lambda t, i: t[i]


@register_native("prim::TupleSlice")
def _tuple_slice(node: Node):
    beg, end = node.attrs.get("beg", 0), node.attrs.get("end")
    return lambda t: t[beg:end]


@register_native("aten::__is__")
def _is(node: Node):
    return lambda a, b: _is_same(a, b)


@register_native("aten::__isnot__")
def _isnot(node: Node):
    return lambda a, b: not _is_same(a, b)


def _is_same(a, b) -> bool:
    # TorchScript's `is`: identity for objects and tensors (same TensorImpl), equality for
    # None. Python's `is` on tensors compares Python objects, which for the same TensorImpl
    # are the same object.
    if a is None or b is None:
        return a is b
    return a is b


@register_native("aten::__not__")
def _not(node: Node):
    return lambda a: not a


@register_native("prim::unchecked_cast")
def _unchecked_cast(node: Node):
    return lambda x: x


@register_native("prim::Uninitialized")
def _uninitialized(node: Node):
    return lambda: None


_EXCEPTIONS = {name: getattr(builtins, name) for name in dir(builtins)
               if isinstance(getattr(builtins, name), type)
               and issubclass(getattr(builtins, name), BaseException)}


class ScriptException(RuntimeError):
    """An exception raised by the model's own code (``raise`` in TorchScript)."""


@register_native("prim::RaiseException")
def _raise(node: Node):
    def raise_exception(msg, cls_name=None):
        cls = ScriptException
        if isinstance(cls_name, str):
            cls = _EXCEPTIONS.get(cls_name.rsplit(".", 1)[-1], ScriptException)
        raise cls(msg)

    return raise_exception


@register_native("prim::PythonOp")
def _python_op(node: Node):
    """A Python callable the script calls (``@torch.jit.ignore``): called with the node's
    inputs, and the scalars TorchScript fixed at compile time where ``cconv`` says ``c``."""
    fn, cconv, scalars = node.attrs["callable"], node.attrs["cconv"], node.attrs["scalar_args"]
    if "c" not in cconv:
        return lambda *a: fn(*a)
    order = tuple(cconv)

    def call(*a):
        values, fixed = iter(a), iter(scalars)
        return fn(*[next(fixed) if c == "c" else next(values) for c in order])

    return call


def _matches_type(x, t: T.Type) -> bool:
    if isinstance(t, T.TensorType):
        return isinstance(x, torch.Tensor)
    if t is T.Int:
        return isinstance(x, int) and not isinstance(x, bool)
    if t is T.Float:
        return isinstance(x, float)
    if t is T.Bool:
        return isinstance(x, bool)
    if t is T.Str:
        return isinstance(x, str)
    if t is T.NoneT:
        return x is None
    if t is T.Any:
        return True
    if isinstance(t, T.ListType):
        return isinstance(x, list) and all(_matches_type(e, t.elem) for e in x)
    if isinstance(t, T.TupleType):
        return (isinstance(x, tuple) and len(x) == len(t.elems)
                and all(_matches_type(e, et) for e, et in zip(x, t.elems)))
    if isinstance(t, T.DictType):
        return isinstance(x, dict)
    if isinstance(t, T.OptionalType):
        return x is None or _matches_type(x, t.elem)
    if isinstance(t, T.ClassType):
        return _class_name(x) == t.name
    return False


def _class_name(x) -> str | None:
    """The qualified TorchScript class name of an object the runtime may hold."""
    if isinstance(x, ScriptObjectValue):
        return x.type_name
    if isinstance(x, torch._C.ScriptObject):
        return x._type().qualified_name()
    # Instances of TorchScript classes held as Python objects (constants, module attributes).
    if torch.jit._state._get_script_class(type(x)) is not None:
        return torch._jit_internal._qualified_name(type(x))
    return None


@register_native("prim::isinstance")
def _isinstance(node: Node):
    candidates = node.attrs.get("types", [])
    return lambda x: any(_matches_type(x, t) for t in candidates)


@register_native("prim::TypeCheck")
def _type_check(node: Node):
    """Profiled graphs: pass inputs through and report whether each matches its profiled
    tensor type (dtype and shape, where the type fixes them)."""
    expected = node.attrs.get("types", [])

    def check(*xs):
        ok = True
        for x, t in zip(xs, expected):
            if not isinstance(x, torch.Tensor):
                ok = False
            elif isinstance(t, T.TensorType):
                if t.dtype is not None and x.dtype != t.dtype:
                    ok = False
                if t.shape is not None and (len(t.shape) != x.dim() or any(
                        d is not None and d != s for d, s in zip(t.shape, x.shape))):
                    ok = False
        return [*xs, ok]

    return check


@register_native("aten::warn")
def _warn(node: Node):
    """``warnings.warn`` in TorchScript code (also inside ``torch.nn.functional``).

    The TorchScript interpreter issues a given ``warn`` node's warning once per function, not
    on every call; so does this. It reaches Python as a ``UserWarning``, as PyTorch's
    ``TORCH_WARN`` does."""
    import threading
    import warnings

    warned = threading.Event()

    def warn(message, stacklevel=2):
        if not warned.is_set():
            warned.set()
            warnings.warn(str(message), UserWarning, stacklevel=2)

    return warn


@register_native("aten::wait")
def _wait(node: Node):
    """The value of a future (``prim::fork``'s, or any ``torch.futures.Future``); re-raises
    the exception the future completed with, unchanged."""

    def wait(future):
        return future.wait()

    return labelled("future.wait()")(wait)
