"""Facts about operator schemas, read from PyTorch's own ``FunctionSchema``.

Everything the runtime decides about an operator (does it write an input, may its output
alias an input, which ``.out`` overload matches it, which arguments are keyword-only) comes
from here, never from the operator's name. (In ``ir/``: a node carries its schema, and every
stage after the IR reads these facts, the passes' alias analysis first.)
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path

import torch


@dataclass(frozen=True)
class ArgInfo:
    name: str
    type: str
    kwarg_only: bool
    #: alias sets before the call, e.g. {"a"}; empty when unannotated
    alias_sets: frozenset[str]
    #: whether the argument is written (``Tensor(a!)``)
    is_write: bool
    #: alias sets it may point into after the call (``t(c -> *)`` gives {"*"})
    after_sets: frozenset[str]
    #: the declared type where ``type`` shows the JIT's erasure (``ScalarType?`` is
    #: ``Optional[int]`` in ``type``, ``Optional[ScalarType]`` here)
    real_type: str = ""


@dataclass(frozen=True)
class SchemaInfo:
    """A parsed schema: ``name`` (``aten::add``), ``overload`` (``Tensor``), args, returns."""

    name: str
    overload: str
    arguments: tuple[ArgInfo, ...]
    returns: tuple[ArgInfo, ...]
    is_vararg: bool
    text: str

    @property
    def qualified(self) -> str:
        return f"{self.name}.{self.overload}" if self.overload else self.name

    @property
    def namespace(self) -> str:
        return self.name.split("::", 1)[0]

    @property
    def base_name(self) -> str:
        return self.name.split("::", 1)[1]

    def writes_any_input(self) -> bool:
        return any(a.is_write for a in self.arguments)

    def views_first_argument(self) -> bool:
        """Whether the one result may be an alias of the first argument (``view``,
        ``expand``, but also ``reshape``, ``contiguous``, ``to``, which copy when they must)
        and nothing is written."""
        if len(self.returns) != 1 or not self.arguments or self.writes_any_input():
            return False
        ret, first = self.returns[0], self.arguments[0]
        return not ret.is_write and bool(ret.alias_sets & first.alias_sets)

    def has_alias_annotations(self) -> bool:
        return any(a.alias_sets or a.is_write for a in self.arguments + self.returns)

    def dtype_argument_indices(self) -> tuple[int, ...]:
        """Positions of the arguments that choose a result dtype (``ScalarType``,
        ``ScalarType?``)."""
        return tuple(i for i, a in enumerate(self.arguments)
                     if a.real_type in ("ScalarType", "Optional[ScalarType]"))

    def is_generic(self) -> bool:
        """Whether a type variable (``t``, ``t[]``, ``Dict(t, t)``...) appears: such ops
        cannot be called through ``torch.ops`` from Python values."""
        return any(_has_type_var(a.type) for a in self.arguments + self.returns)


def _arg_info(a: torch._C.Argument) -> ArgInfo:
    info = a.alias_info
    before = frozenset(info.before_set) if info is not None else frozenset()
    after = frozenset(info.after_set) if info is not None else frozenset()
    return ArgInfo(a.name, str(a.type), bool(getattr(a, "kwarg_only", False)), before,
                   bool(info.is_write) if info is not None else False, after,
                   str(getattr(a, "real_type", a.type)))


_TYPE_VARS = {"t", "t1", "t2", "tVal", "tKey", "Any", "t?", "t[]"}


def _has_type_var(type_str: str) -> bool:
    import re

    return any(tok in _TYPE_VARS for tok in re.findall(r"[A-Za-z_][A-Za-z0-9_]*", type_str))


@functools.cache
def parse(schema: str) -> SchemaInfo:
    s = torch._C.parse_schema(schema)
    return SchemaInfo(
        s.name, s.overload_name, tuple(_arg_info(a) for a in s.arguments),
        tuple(_arg_info(r) for r in s.returns), "..." in schema.split("->", 1)[0], schema)


@functools.cache
def resolve_overload(schema: str) -> torch._ops.OpOverload | None:
    """The ``torch.ops`` overload a schema names, or None if PyTorch has none."""
    info = parse(schema)
    try:
        packet = getattr(getattr(torch.ops, info.namespace), info.base_name)
        return getattr(packet, info.overload or "default")
    except (AttributeError, RuntimeError):
        return None


@functools.cache
def find_out_overload(schema: str) -> tuple[torch._ops.OpOverload, str] | None:
    """The ``.out`` overload equivalent to a functional schema, and its out argument's name.

    Equivalent means: the same arguments (names, types, keyword-only-ness), plus exactly one
    extra keyword-only ``Tensor(a!)`` argument, and one returned tensor. Returns None when no
    such overload exists, the functional op is not purely functional (alias annotations), or
    the overload is only ATen's generated wrapper (see ``generated_out_wrappers``).
    """
    info = parse(schema)
    if info.has_alias_annotations() or len(info.returns) != 1 or info.returns[0].type != "Tensor":
        return None
    try:
        packet = getattr(getattr(torch.ops, info.namespace), info.base_name)
        names = packet.overloads()
    except (AttributeError, RuntimeError):
        return None
    want = [(a.name, a.type, a.kwarg_only) for a in info.arguments]
    for name in names:
        if not name.endswith("out"):
            continue
        overload = getattr(packet, name)
        cand = parse(str(overload._schema))
        outs = [a for a in cand.arguments if a.is_write]
        if len(outs) != 1 or outs[0].type != "Tensor" or not outs[0].kwarg_only:
            continue
        if info.namespace == "aten" and f"{info.base_name}.{name}" in generated_out_wrappers():
            continue
        rest = [(a.name, a.type, a.kwarg_only) for a in cand.arguments if not a.is_write]
        if rest == want and len(cand.returns) == 1:
            return overload, outs[0].name
    return None


@functools.cache
def generated_out_wrappers() -> frozenset[str]:
    """ATen ``.out`` overloads (``relu.out``, ``mul.Scalar_out``) that are generated wrappers.

    ATen declares them with ``autogen:`` in ``native_functions.yaml``; their kernel calls the
    functional op, which allocates, then resizes ``out`` and copies into it. As out variants
    they save nothing, and they change the result's layout: a resized ``out`` is contiguous,
    where the functional op (``relu``, ``x * 2``, ``clone`` of a transposed tensor) keeps its
    input's strides, which ``is_contiguous()``, ``stride()`` or a later ``view`` can observe.
    Real ``.out`` kernels (TensorIterator, structured kernels) restride a resized ``out`` to
    the layout the functional op would return, so they are kept. The yaml ships with torch
    (in ``torchgen``); without it nothing is known, and no overload is excluded.
    """
    try:
        import torchgen
    except ImportError:
        return frozenset()
    path = Path(torchgen.__file__).parent / "packaged" / "ATen" / "native" / "native_functions.yaml"
    if not path.exists():
        return frozenset()
    names: set[str] = set()
    # ``autogen: a.out, b.Scalar_out`` lines: read as text, a full YAML parse is not needed.
    for line in path.read_text().splitlines():
        line = line.strip()
        if line.startswith("autogen:"):
            names.update(n.strip() for n in line[len("autogen:"):].split(",") if n.strip())
    return frozenset(names)


def matches(node_schema: str | None, signature: str) -> bool:
    """Whether a node's schema is exactly ``signature`` (compared after normalising)."""
    if node_schema is None:
        return False
    return str(torch._C.parse_schema(node_schema)) == str(torch._C.parse_schema(signature))


@functools.cache
def tags(schema: str) -> frozenset[str]:
    """PyTorch's tags of the operator a schema names (``dynamic_output_shape``,
    ``data_dependent_output``, ``pointwise``...); empty for operators without any."""
    op = resolve_overload(schema)
    return frozenset(t.name for t in getattr(op, "tags", ())) if op is not None else frozenset()


#: Tags saying an output's size (or a scalar that may become a size) depends on tensor data.
DATA_DEPENDENT_TAGS = frozenset({"dynamic_output_shape", "data_dependent_output"})


_SCALAR_TYPES = ("number", "Optional[number]", "int", "float", "bool")


@functools.cache
def scalar_as_tensor_overload(schema: str, positions: frozenset[int]) -> str | None:
    """The schema of the overload of the same operator that takes a tensor (a 0-dim one will
    do) where ``schema`` takes a number at each of ``positions``, the other arguments the
    same by name and type: ``mul.Scalar`` → ``mul.Tensor``, ``where.ScalarOther`` →
    ``where.self``, ``clamp`` → ``clamp.Tensor``. None if there is none."""
    info = parse(schema)
    if not all(info.arguments[p].type in _SCALAR_TYPES for p in positions):
        return None
    try:
        packet = getattr(getattr(torch.ops, info.namespace), info.base_name)
    except (AttributeError, RuntimeError):
        return None
    for name in packet.overloads():
        other = parse(str(getattr(packet, name)._schema))
        if (len(other.arguments) != len(info.arguments) or other.returns != info.returns
                or other.writes_any_input()):
            continue
        if all(a.name == b.name and (a.type in ("Tensor", "Optional[Tensor]") if i in positions
                                     else a.type == b.type)
               for i, (a, b) in enumerate(zip(other.arguments, info.arguments))):
            return other.text
    return None
