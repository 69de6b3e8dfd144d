"""A call of one Python binding with a node's inputs: which inputs go positionally, which by
keyword and which constants can be left out (``call_of``), and the callable made of it
(``make``: the binding itself, or a small generated function)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from static_runtime.ops import python_signatures as P
from static_runtime.ops.enums import enum_list
from static_runtime.ops.python_signatures import Kind, Kinds
from static_runtime.ops.registry import Const, InlineCall, forwards, labelled

#: "Not a constant" (a constant may be None).
ABSENT = object()


@dataclass(frozen=True)
class Arg:
    """One node input as the resolver sees it."""

    index: int
    name: str               # the schema's argument name
    kinds: Kinds
    constant: Any = ABSENT     # the (converted) constant value, if it is one
    converted: bool = False         # the constant was converted (dtype from int...)
    #: a ``ScalarType``/``Layout``/``MemoryFormat`` input that is not a constant: TorchScript
    #: passes it as an int, which the call converts (``Kind.DTYPE``...; None passes through)
    enum: Kind | None = None

    @property
    def is_constant(self) -> bool:
        return self.constant is not ABSENT


DROP_ALL, DROP_KEYWORDS, DROP_NONE = 2, 1, 0


def call_of(sig: P.PySignature, args: list[Arg], method: bool, out: bool,
            drop: int) -> tuple[Arg | None, list[Arg], dict[str, Arg]] | None:
    """The receiver (for a method: the schema's ``self``), positional and keyword arguments
    of a call to ``sig`` with the node's inputs; None if the inputs do not map onto the
    signature's parameters. Constants are left out where that changes nothing: with
    ``DROP_ALL`` keyword ones and trailing positional ones, with ``DROP_KEYWORDS`` keyword
    ones only."""
    by_name = {a.name: a for a in args}
    receiver = by_name.pop("self", None) if method else None
    if method and (receiver is None or Kind.TENSOR not in receiver.kinds):
        return None
    mapped: list[tuple[P.PyParam, Arg | None]] = []
    for p in sig.params:
        name = p.name
        if name == "input" and "input" not in by_name and not method:
            name = "self"
        if out and p.name == "out":
            mapped.append((p, None))
            continue
        arg = by_name.pop(name, None)
        if arg is None and not p.optional:
            return None
        mapped.append((p, arg))
    if by_name:
        return None     # an input the signature has no parameter for
    positional: list[Arg] = []
    keywords: dict[str, Arg] = {}
    pos_params = [(p, a) for p, a in mapped if not p.kw_only]
    last = max((i for i, (p, a) in enumerate(pos_params)
                if a is not None and (drop < DROP_ALL or not _droppable(p, a))), default=-1)
    for p, a in pos_params[:last + 1]:
        if a is None:
            return None     # a gap the call cannot leave
        positional.append(a)
    for p, a in mapped:
        if p.kw_only and a is not None and (drop < DROP_KEYWORDS or not _droppable(p, a)):
            keywords[p.name] = a
    return receiver, positional, keywords


def _droppable(p: P.PyParam, a: Arg) -> bool:
    """Whether leaving ``a`` out of the call is the same as passing it: a constant None for a
    parameter with a default that accepts None (the parser stores "absent" either way), or a
    constant equal to the parameter's default."""
    if not a.is_constant or not p.optional:
        return False
    if a.constant is None:
        return p.allow_none
    default = _default_value(p)
    return default is not ABSENT and _same(a.constant, default)


def _default_value(p: P.PyParam) -> Any:
    """A parameter's default, as the parser reads it (``FunctionParameter::set_default_str``)."""
    text = p.default
    if text is None or text == "None":
        return None if text == "None" else ABSENT
    try:
        if p.type == "bool":
            return {"True": True, "False": False, "true": True, "false": False}[text]
        if p.type in ("int", "symint"):
            return int(text)
        if p.type == "double":
            return float(text)
        if p.type == "scalar":
            try:
                return int(text, 0)
            except ValueError:
                return float(text)
        if p.type == "int_list":
            if text.startswith("{"):
                return [int(x) for x in text[1:-1].split(",") if x]
            return [int(text)] * p.size if p.size else ABSENT
        if p.type == "str" and len(text) >= 2 and text[0] == text[-1] and text[0] in "'\"" \
                and "\\" not in text:
            return text[1:-1]
        if p.type in ("dtype", "layout") and text.startswith("torch."):
            return getattr(torch, text[len("torch."):])
    except (KeyError, ValueError, AttributeError):
        pass
    return ABSENT


def _same(value: Any, default: Any) -> bool:
    if isinstance(default, list):
        return (isinstance(value, (list, tuple)) and len(value) == len(default)
                and all(_same(v, d) for v, d in zip(value, default)))
    return type(value) is type(default) and value == default


# --------------------------------------------------------------------------- the callable


def make(binding: Callable[..., Any], spelling: str, n_inputs: int, receiver: Arg | None,
         positional: list[Arg], keywords: dict[str, Arg], out: bool,
         returns: str) -> Callable[..., Any]:
    order = ([receiver] if receiver is not None else []) + positional
    if (not out and not keywords and not returns
            and not any(a.converted or a.enum is not None for a in order)
            and [a.index for a in order] == list(range(n_inputs))):
        # The node's inputs are the binding's arguments as they are: no wrapper.
        return labelled(spelling)(binding)
    spelled = [spell(a) for a in order] + [f"{k}={spell(a)}" for k, a in keywords.items()]
    if out:
        spelled.append("out=out")
    label = f"{spelling}({', '.join(spelled)})"
    return labelled(label)(generate(binding, spelling, n_inputs, order, keywords, out, returns))


def spell(a: Arg) -> str:
    if not a.is_constant or isinstance(a.constant, torch.Tensor):
        return a.name
    return repr(a.constant)


def generate(binding: Callable[..., Any], spelling: str, n_inputs: int, positional: list[Arg],
             keywords: dict[str, Arg], out: bool, returns: str) -> Callable[..., Any]:
    """``def <op>([out, ]a0, a1, ...): return f(...)``, compiled with an explicit namespace:
    ``f`` the binding, ``c<i>`` the converted constants."""
    namespace: dict[str, Any] = {"f": binding, "list": list}

    def ref(a: Arg) -> str:
        if a.converted:
            namespace[f"c{a.index}"] = a.constant
            return f"c{a.index}"
        if a.enum is not None:
            # TorchScript's int for a dtype/layout/memory format → the object (None stays)
            name = f"t_{a.enum.name}"
            namespace.setdefault(name, enum_list(a.enum))
            if Kind.NONE in a.kinds:
                return f"(None if a{a.index} is None else {name}[a{a.index}])"
            return f"{name}[a{a.index}]"
        return f"a{a.index}"

    params = (["out"] if out else []) + [f"a{i}" for i in range(n_inputs)]
    call_args = [ref(a) for a in positional] + [f"{k}={ref(a)}" for k, a in keywords.items()]
    if out:
        call_args.append("out=out")
    call = f"f({', '.join(call_args)})"
    if returns == "list":
        call = f"list({call})"
    fname = "".join(c if c.isalnum() else "_" for c in spelling.rsplit(".", 1)[-1])
    while fname in namespace or fname in params:
        fname += "_"
    src = f"def {fname}({', '.join(params)}):\n    return {call}\n"
    exec(compile(src, f"<static_runtime binding: {spelling}>", "exec"), namespace)  # noqa: S102

    fn = namespace[fname]
    if any(a.enum is not None and not a.converted for a in [*positional, *keywords.values()]):
        return fn  # converts an argument per call: not a plain forward

    def item(a: Arg) -> int | Const:
        return Const(a.constant) if a.converted else a.index

    return forwards(InlineCall(binding, tuple(item(a) for a in positional),
                               tuple((k, item(a)) for k, a in keywords.items()),
                               "out" if out else None, returns == "list"))(fn)
