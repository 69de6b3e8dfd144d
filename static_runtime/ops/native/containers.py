"""Lists and dicts, with TorchScript's semantics, operating on Python lists and dicts in place.

Operators that write into a list or dict (``aten::append``, ``aten::_set_item``...) must be
native: the fallback would convert the container to a TorchScript value, i.e. copy it.
Others are here because a Python one-liner is far cheaper than a call into PyTorch.
"""

from __future__ import annotations

from static_runtime.ir.graph import Node
from static_runtime.ops.registry import register_native


def _first_arg_is_dict(node: Node) -> bool:
    return bool(node.schema) and node.schema.split("(", 2)[1].startswith("Dict(")


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
    return lst.pop(idx)


_MISSING = object()


@register_native("aten::pop")
def _pop(node: Node):
    if not _first_arg_is_dict(node):
        return _list_pop

    def dict_pop(d, key, default=_MISSING):
        if key in d:
            return d.pop(key)
        if default is _MISSING:
            raise KeyError(f"KeyError: {key}")
        return default

    return dict_pop


@register_native("aten::popitem")
def _popitem(node: Node):
    def popitem(d):
        if not d:
            raise KeyError("popitem(): dictionary is empty")
        return d.popitem()

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
        try:
            lst.remove(el)
        except ValueError:
            raise ValueError("list.remove(x): x not in list") from None

    return remove


@register_native("aten::sort")
def _sort(node: Node):
    if node.schema and node.schema.startswith("aten::sort.") and "t[](a!)" in node.schema \
            or node.schema and any(f"aten::sort.{k}(" in node.schema
                                   for k in ("int", "float", "bool", "str")):
        return lambda lst, reverse=False: lst.sort(reverse=reverse)
    return None


@register_native("aten::add_")
def _list_add_(node: Node):
    if node.schema is None or not node.schema.startswith("aten::add_.t("):
        return None

    def add_(lst, other):
        lst.extend(other)
        return lst

    return add_


@register_native("aten::mul_")
def _list_mul_(node: Node):
    if node.schema is None or not node.schema.startswith("aten::mul_.t("):
        return None

    def mul_(lst, n):
        lst[:] = lst * n
        return lst

    return mul_


# ---------------------------------------------------------------- non-mutating, for speed


@register_native("aten::__getitem__")
def _getitem(node: Node):
    if node.schema is None or not (node.schema.startswith("aten::__getitem__.t(")
                                   or _first_arg_is_dict(node)):
        return None  # str indexing and others: the fallback
    if _first_arg_is_dict(node):
        def dict_get(d, key):
            try:
                return d[key]
            except KeyError:
                raise KeyError(f"KeyError: {key}") from None

        return dict_get

    def list_get(lst, idx):
        try:
            return lst[idx]
        except IndexError:
            raise IndexError("list index out of range") from None

    return list_get


@register_native("aten::len")
def _len(node: Node):
    if node.schema and (node.schema.startswith("aten::len.t(") or _first_arg_is_dict(node)
                        or node.schema.startswith("aten::len.str(")):
        return len
    return None


@register_native("aten::list")
def _list(node: Node):
    if node.schema and node.schema.startswith("aten::list.t("):
        return list
    return None


@register_native("aten::keys")
def _keys(node: Node):
    return lambda d: list(d.keys())


@register_native("aten::values")
def _values(node: Node):
    return lambda d: list(d.values())


@register_native("aten::items")
def _items(node: Node):
    return lambda d: [tuple(kv) for kv in d.items()]


@register_native("aten::dict")
def _dict(node: Node):
    if not node.inputs:
        return dict
    if _first_arg_is_dict(node):
        return dict
    return lambda pairs: dict(pairs)


@register_native("aten::__contains__")
def _contains(node: Node):
    if node.schema is None:
        return None
    if _first_arg_is_dict(node):
        return lambda d, key: key in d
    first = node.inputs[0].type
    from static_runtime.ir import types as T

    if isinstance(first, T.ListType) and not isinstance(first.elem, T.TensorType):
        return lambda lst, item: item in lst
    return None
