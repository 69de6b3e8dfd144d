"""Type families: what kinds of object a value of a given IR type may be, or may hold.

Alias analysis only relates values that may be the same kind of object (a list is never a
tensor), so every rule asks these questions of types rather than of values.
"""

from __future__ import annotations

from static_runtime.ir import types as T
from static_runtime.ir.graph import Value

#: Type families: what kind of object a value may be.
TENSOR, LIST, DICT, TUPLE, OBJECT, FUTURE = "Tensor", "List", "Dict", "Tuple", "Object", "Future"
ALL_FAMILIES = frozenset({TENSOR, LIST, DICT, TUPLE, OBJECT, FUTURE})

def deep_families(t: T.Type) -> frozenset[str]:
    """Families of the objects a value of type ``t`` may be or may (transitively) contain."""
    if isinstance(t, T.TensorType):
        return frozenset({TENSOR})
    if isinstance(t, T.ListType):
        return frozenset({LIST}) | deep_families(t.elem)
    if isinstance(t, T.DictType):
        return frozenset({DICT}) | deep_families(t.key) | deep_families(t.value)
    if isinstance(t, T.TupleType):
        inner = frozenset().union(*(deep_families(e) for e in t.elems))
        return inner | {TUPLE} if inner else inner
    if isinstance(t, T.OptionalType):
        return deep_families(t.elem)
    if isinstance(t, T.UnionType):
        return frozenset().union(*(deep_families(m) for m in t.members))
    if isinstance(t, T.FutureType):
        return frozenset({FUTURE}) | deep_families(t.elem)
    if isinstance(t, (T.ClassType, T.OpaqueType)) or t is T.Any:
        return ALL_FAMILIES
    return frozenset()


def shallow_families(t: T.Type) -> frozenset[str]:
    """Families of the object a value of type ``t`` may itself be."""
    if isinstance(t, T.TensorType):
        return frozenset({TENSOR})
    if isinstance(t, T.ListType):
        return frozenset({LIST})
    if isinstance(t, T.DictType):
        return frozenset({DICT})
    if isinstance(t, T.TupleType):
        return frozenset({TUPLE})
    if isinstance(t, T.OptionalType):
        return shallow_families(t.elem)
    if isinstance(t, T.UnionType):
        return frozenset().union(*(shallow_families(m) for m in t.members))
    if isinstance(t, T.FutureType):
        return frozenset({FUTURE})
    if isinstance(t, T.ClassType):
        return frozenset({OBJECT})
    if isinstance(t, T.OpaqueType) or t is T.Any:
        return ALL_FAMILIES
    return frozenset()


def element_families(t: T.Type) -> frozenset[str]:
    """Families of the objects a container of type ``t`` may hold (at any depth)."""
    if isinstance(t, T.ListType):
        return deep_families(t.elem)
    if isinstance(t, T.DictType):
        return deep_families(t.key) | deep_families(t.value)
    if isinstance(t, T.TupleType):
        return frozenset().union(*(deep_families(e) for e in t.elems))
    if isinstance(t, T.FutureType):
        return deep_families(t.elem)
    if isinstance(t, T.OptionalType):
        return element_families(t.elem)
    if isinstance(t, T.UnionType):
        return frozenset().union(*(element_families(m) for m in t.members))
    if isinstance(t, (T.ClassType, T.OpaqueType)) or t is T.Any:
        return ALL_FAMILIES
    return frozenset()


def is_container_type(t: T.Type) -> bool:
    """Whether values of ``t`` may hold other mutable values."""
    return bool(element_families(t))


def is_mutable(v: Value) -> bool:
    return T.is_mutable_type(v.type)

