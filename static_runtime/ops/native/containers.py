"""Lists and dicts, with TorchScript's semantics, operating on Python lists and dicts in place.

Operators that write into a list or dict (``aten::append``, ``aten::_set_item``...) must be
native: the fallback would convert the container to a TorchScript value, i.e. copy it.
So must the generic ones (a type variable ``t`` in the schema) that hand back elements or
parts of a container (``__getitem__``, ``get``, ``copy``, list ``+``, slicing...): through the
fallback, a list nested in a list or dict would come back as a copy, and a later
``d["xs"].append(...)`` would be lost; a TorchScript class instance could not be converted
at all. The rest are here because a Python one-liner is far cheaper than a call into PyTorch.

Which implementation applies is decided from the node's schema (the overload's argument
types), never from the values seen at run time.
"""

from __future__ import annotations

import operator

from static_runtime.ir import schema as S
from static_runtime.ir.graph import Node
from static_runtime.ops.registry import register_native


def _arg_types(node: Node) -> list[str] | None:
    if not node.schema:
        return None
    return [a.type for a in S.parse(node.schema).arguments]


# Argument types as PyTorch's parsed schema spells them: ``List[t]``, ``Dict[str, t]``,
# ``Optional[int]``, ``number`` (for ``Scalar``), alias annotations dropped.


def _is_list(type_str: str) -> bool:
    return type_str.startswith("List[")


def _first_arg_is_dict(node: Node) -> bool:
    types = _arg_types(node)
    return bool(types) and types[0].startswith("Dict[")


def _first_arg_is_list(node: Node) -> bool:
    types = _arg_types(node)
    return bool(types) and _is_list(types[0])


def _eq(a, b) -> bool:
    # TorchScript compares list elements with ``==`` only (``std::find``; ``eq(..).is_nonzero()``
    # for tensors). Python's ``in``/``list.remove`` test identity first, which differs for NaN.
    return bool(a == b)


@register_native("aten::append")
def _append(node: Node):
    def append(lst, el):
        lst.append(el)
        return lst

    return append


@register_native("aten::extend")
def _extend(node: Node):
    return lambda lst, other: lst.extend(other)


@register_native("aten::insert")
def _insert(node: Node):
    return lambda lst, idx, el: lst.insert(idx, el)


def _list_pop(lst, idx=-1):
    if not lst:
        raise IndexError("pop from empty list")
    try:
        return lst.pop(idx)
    except IndexError:
        raise IndexError("pop index out of range") from None


_MISSING = object()


@register_native("aten::pop")
def _pop(node: Node):
    if _first_arg_is_list(node):
        return _list_pop
    if not _first_arg_is_dict(node):
        return None

    def dict_pop(d, key, default=_MISSING):
        if key in d:
            return d.pop(key)
        if default is _MISSING:
            raise KeyError(f"KeyError: {key}")
        return default

    return dict_pop


@register_native("aten::popitem")
def _popitem(node: Node):
    # TorchScript's ``dictPopItem`` removes the *first* item in insertion order (Python's
    # ``dict.popitem`` removes the last).
    def popitem(d):
        if not d:
            raise KeyError("popitem(): dictionary is empty")
        key = next(iter(d))
        return (key, d.pop(key))

    return popitem


@register_native("aten::clear")
def _clear(node: Node):
    return lambda c: c.clear()


@register_native("aten::Delete")
def _delete(node: Node):
    def delete(c, key):
        del c[key]

    return delete


@register_native("aten::_set_item")
def _set_item(node: Node):
    if _first_arg_is_dict(node):
        def dict_set(d, key, value):
            d[key] = value

        return dict_set
    if not _first_arg_is_list(node):
        return None

    def list_set(lst, idx, el):
        lst[idx] = el
        return lst

    return list_set


@register_native("aten::update")
def _update(node: Node):
    return lambda d, other: d.update(other)


@register_native("aten::setdefault")
def _setdefault(node: Node):
    return lambda d, key, default: d.setdefault(key, default)


@register_native("aten::reverse")
def _reverse(node: Node):
    return lambda lst: lst.reverse()


@register_native("aten::remove")
def _remove(node: Node):
    def remove(lst, el):
        for i, e in enumerate(lst):
            if _eq(e, el):
                del lst[i]
                return
        raise ValueError("list.remove(x): x not in list")

    return remove


@register_native("aten::sort")
def _sort(node: Node):
    # Every overload (int, float, bool, str, Tensor, any) sorts its list argument in place
    # with ``<``; for tensors that is ``a.lt(b)`` made a bool, as TorchScript does.
    if not _first_arg_is_list(node):
        return None
    return lambda lst, reverse=False: lst.sort(reverse=reverse)


@register_native("aten::sorted")
def _sorted(node: Node):
    if not _first_arg_is_list(node):
        return None
    return sorted


@register_native("aten::add_")
def _list_add_(node: Node):
    if not _first_arg_is_list(node):
        return None  # the tensor overloads

    def add_(lst, other):
        lst.extend(other)
        return lst

    return add_


@register_native("aten::mul_")
def _list_mul_(node: Node):
    if not _first_arg_is_list(node):
        return None

    def mul_(lst, n):
        lst[:] = lst * n
        return lst

    return mul_


# ------------------------------------------------ reading, keeping the elements' identity


@register_native("aten::__getitem__")
def _getitem(node: Node):
    if _first_arg_is_dict(node):
        def dict_get(d, key):
            try:
                return d[key]
            except KeyError:
                raise KeyError(f"KeyError: {key}") from None

        return dict_get
    if not _first_arg_is_list(node):
        return None  # str indexing: the fallback

    def list_get(lst, idx):
        try:
            return lst[idx]
        except IndexError:
            raise IndexError("list index out of range") from None

    return list_get


@register_native("aten::get")
def _get(node: Node):
    if not _first_arg_is_dict(node):
        return None
    return lambda d, key, default=None: d.get(key, default)


@register_native("aten::copy")
def _copy(node: Node):
    # Shallow copies, as TorchScript's ``list.copy()``/``dict.copy()``.
    if _first_arg_is_list(node):
        return list
    if _first_arg_is_dict(node):
        return dict
    return None  # aten::copy(Tensor...) and others


@register_native("aten::slice")
def _slice(node: Node):
    if not _first_arg_is_list(node):
        from static_runtime.ops.selection import tensor_slice

        return tensor_slice(node)  # None for str slicing (and tensor slices it declines)

    def list_slice(lst, start=None, end=None, step=1):
        if step == 0:
            raise ValueError("slice step cannot be zero")
        return lst[start:end:step]

    return list_slice


def list_concat(node: Node):
    """``aten::add.t(t[] a, t[] b)`` and ``aten::add.str``; registered together with the
    scalar ``aten::add``."""
    types = _arg_types(node)
    if types == ["str", "str"]:
        return operator.add
    if not types or len(types) != 2 or not all(_is_list(t) for t in types):
        return None
    return lambda a, b: a + b


#: Lists whose elements Python's ``==`` compares as TorchScript does (no NaN, no tensors).
_EXACT_ELEMENTS = frozenset({"List[int]", "List[str]", "List[bool]"})


def list_compare(node: Node):
    """``aten::eq``/``aten::ne`` of two int, str or bool lists (``.int_list``...):
    registered together with the scalar comparisons. TorchScript compares lengths, then
    elements with ``==``, as Python's list comparison does for these element types. Float
    lists (NaN) and tensor lists are left to the fallback."""
    types = _arg_types(node)
    if not types or len(types) != 2 or types[0] != types[1] or types[0] not in _EXACT_ELEMENTS:
        return None
    return {"aten::eq": operator.eq, "aten::ne": operator.ne}.get(node.kind)


@register_native("aten::all", "aten::any")
def _all_any(node: Node):
    """``all``/``any`` of an int, float, bool or str list: TorchScript tests each element for
    being non-zero (non-empty for strings), which is Python's truth value of these types."""
    types = _arg_types(node)
    if not types or len(types) != 1 or types[0] not in (
            "List[int]", "List[float]", "List[bool]", "List[str]"):
        return None  # the tensor overloads
    return all if node.kind == "aten::all" else any


def list_repeat(node: Node):
    """``aten::mul.left_t(t[] l, int n)`` and ``aten::mul.right_(int n, t[] l)``; registered
    together with the scalar ``aten::mul``."""
    types = _arg_types(node)
    if not types or len(types) != 2:
        return None
    if _is_list(types[0]) and types[1] == "int":
        return lambda lst, n: lst * n
    if types[0] == "int" and _is_list(types[1]):
        return lambda n, lst: n * lst
    return None


@register_native("aten::len")
def _len(node: Node):
    types = _arg_types(node)
    if types and (_is_list(types[0]) or types[0].startswith("Dict[") or types[0] == "str"):
        return len
    return None  # aten::len.Tensor: the fallback (it raises for 0-dim tensors)


@register_native("aten::list")
def _list(node: Node):
    if _first_arg_is_list(node):
        return list
    return None


@register_native("aten::keys")
def _keys(node: Node):
    return lambda d: list(d.keys())


@register_native("aten::values")
def _values(node: Node):
    if not _first_arg_is_dict(node):
        return None  # aten::values(Tensor) of sparse tensors
    return lambda d: list(d.values())


@register_native("aten::items")
def _items(node: Node):
    return lambda d: list(d.items())


@register_native("aten::dict")
def _dict(node: Node):
    if not node.inputs:
        return dict
    return dict  # from a dict (a shallow copy) or from a list of (key, value) tuples


@register_native("aten::__contains__")
def _contains(node: Node):
    types = _arg_types(node)
    if _first_arg_is_dict(node):
        return operator.contains  # ``key in d``
    if types and types[0] in _EXACT_ELEMENTS:
        # Python's ``in`` tests identity, then ``==``: for ints, strings and bools the same
        # answer as TorchScript's ``==`` alone.
        return operator.contains
    if _first_arg_is_list(node):
        return lambda lst, item: any(_eq(e, item) for e in lst)
    return None
