"""Differential cases for TorchScript's containers: lists, dicts and tuples.

Each case is a scripted function run by ``differential.check`` on a first input set, a
second set of other shapes (or other values), and the first set again.
"""


import pytest
import torch
from differential import check


def r(*shape):
    return torch.randn(*shape)


# --------------------------------------------------------------------------- lists


def list_index(x: torch.Tensor):
    lst = [x, x + 1, x * 2]
    return lst[1]


def list_negative_index(x: torch.Tensor):
    lst = [x, x + 1, x * 2]
    return lst[-1] - lst[-3]


def list_index_by_input(x: torch.Tensor, i: int):
    lst = [x, x + 1, x * 2, x - 3]
    return lst[i]


def list_index_out_of_range(x: torch.Tensor, i: int):
    lst = [x, x + 1]
    return lst[i]


def list_slice(x: torch.Tensor):
    lst = [x, x + 1, x + 2, x + 3, x + 4]
    return lst[1:3], lst[-2:], lst[:1]


def list_slice_step(n: int):
    lst = [i * i for i in range(n)]
    return lst[::2], lst[1::3], lst[::-1]


def list_len(xs: list[torch.Tensor]):
    return len(xs), len([1, 2, 3])


def list_append(x: torch.Tensor):
    lst: list[torch.Tensor] = []
    lst.append(x)
    lst.append(x.sum(0, keepdim=True))
    lst.append(x * 3)
    return torch.cat(lst, 0)


def list_extend(a: list[int], b: list[int]):
    c = [0]
    c.extend(a)
    c.extend(b)
    return c


def list_insert(x: torch.Tensor):
    lst = [x, x * 2]
    lst.insert(0, x - 1)
    lst.insert(2, x + 100)
    lst.insert(-1, x * 0)
    return lst


def list_pop(n: int):
    lst = [i for i in range(n)]
    last = lst.pop()
    return last, lst


def list_pop_index(xs: list[int], i: int):
    lst = [x for x in xs]
    got = lst.pop(i)
    return got, lst


def list_pop_empty(n: int):
    lst = [i for i in range(n)]
    return lst.pop()


def list_clear(x: torch.Tensor):
    lst = [x, x + 1]
    lst.clear()
    lst.append(x * 5)
    return len(lst), lst


def list_remove(a: int):
    lst = [1, 2, 3, 2, 1]
    lst.remove(a)
    return lst


def list_reverse(xs: list[int]):
    lst = xs.copy()
    lst.reverse()
    return lst


def list_sort_ints(xs: list[int]):
    lst = xs.copy()
    lst.sort()
    out = xs.copy()
    out.sort(reverse=True)
    return lst, out


def list_sort_floats(xs: list[float]):
    lst = xs.copy()
    lst.sort()
    return lst


def list_sorted(xs: list[int]):
    return sorted(xs), xs


def list_sorted_strings(xs: list[str]):
    return sorted(xs)


def list_contains_int(xs: list[int], a: int):
    return a in xs, a not in xs, 7 in xs


def list_contains_str(a: str):
    return a in ["x", "yy", "zzz"]


def list_concat(x: torch.Tensor):
    a = [x, x + 1]
    b = [x * 2]
    c = a + b
    return len(c), torch.stack(c)


def list_concat_ints(a: list[int], b: list[int]):
    return a + b + [9]


def list_repeat(a: list[int], n: int):
    return a * n, [0] * n


def list_inplace_add(a: list[int]):
    b = [1, 2]
    b += a
    return b


def list_set_item(x: torch.Tensor):
    lst = [x, x + 1, x + 2]
    lst[1] = x * 10
    lst[-1] = x * 20
    return lst


def list_del_item(xs: list[int]):
    lst = xs.copy()
    del lst[0]
    return lst


def list_index_method_and_count(xs: list[int]):
    return xs.index(2), xs.count(2)


def list_equality(a: list[int], b: list[int]):
    return a == b, a != b


def list_min_max_sum(xs: list[int]):
    return min(xs), max(xs), sum(xs)


def list_of_tensors_input(xs: list[torch.Tensor]):
    total = torch.zeros_like(xs[0])
    for t in xs:
        total = total + t
    return total


def list_comprehension_tensors(xs: list[torch.Tensor]):
    ys = [t * 2 + 1 for t in xs]
    return torch.cat(ys, 0)


def list_comprehension_range(n: int):
    return [i * 3 - 1 for i in range(n)]


def enumerate_loop(xs: list[torch.Tensor]):
    out = torch.zeros_like(xs[0])
    for i, t in enumerate(xs):
        out = out + t * i
    return out


def zip_loop(xs: list[torch.Tensor], ws: list[float]):
    out = torch.zeros_like(xs[0])
    for t, w in zip(xs, ws):
        out = out + t * w
    return out


def list_of_lists(n: int):
    grid: list[list[int]] = []
    for i in range(n):
        grid.append([i * j for j in range(n)])
    return grid, grid[-1] if n > 0 else [-1]


def list_from_size(x: torch.Tensor):
    s = x.size()
    s2 = list(s)
    s2.append(1)
    return x.view(s2), s


def tensor_from_int_list(xs: list[int]):
    return torch.tensor(xs), torch.tensor([float(v) for v in xs])


def list_returned_and_mutated_after(x: torch.Tensor):
    lst = [x + 1]
    out = lst
    lst.append(x + 2)
    return out


def list_aliasing_through_append(x: torch.Tensor):
    a: list[torch.Tensor] = []
    b = a
    b.append(x)
    a.append(x * 2)
    return len(b), b


def list_unpack(x: torch.Tensor):
    a, b, c = [x, x + 1, x + 2]
    return c - a + b


def list_unpack_from_input(xs: list[int]):
    a, b = xs
    return a - b


def list_unpack_one(x: torch.Tensor):
    # a one-element list unpacked (tools/opdb: torch.gradient of a 1-d tensor): the
    # interpreter took the list itself for its element
    (a,) = torch.unbind(x)
    return a * 2


def list_unpack_one_from_input(xs: list[torch.Tensor]):
    (a,) = xs
    return a + 1


def tensor_unbind_list(x: torch.Tensor):
    parts = x.unbind(0)
    return [p.sum() for p in parts]


def iterate_tensor(x: torch.Tensor):
    acc = []
    for row in x:
        acc.append(row.max())
    return torch.stack(acc)


def list_of_optional(x: torch.Tensor, flag: bool):
    lst: list[torch.Tensor | None] = [x, None]
    if flag:
        lst[1] = x * 2
    out = []
    for t in lst:
        if t is not None:
            out.append(t)
    return out


def list_mutating_input(xs: list[int]):
    xs.append(4)
    return xs


def list_mutating_tensor_input_list(xs: list[torch.Tensor]):
    xs.pop()
    return len(xs)


LIST_CASES = [
    (list_index, [r(3)], [r(2, 5)]),
    (list_negative_index, [r(3)], [r(4, 2)]),
    (list_index_by_input, [r(3), 2], [r(5), -1]),
    (list_index_out_of_range, [r(3), 1], [r(3), 5]),
    (list_slice, [r(3)], [r(1, 2)]),
    (list_slice_step, [7], [0]),
    (list_len, [[r(2), r(3)]], [[r(1)]]),
    (list_append, [r(2, 3)], [r(4, 1)]),
    (list_extend, [[1, 2], [3]], [[], [4, 5, 6]]),
    (list_insert, [r(2)], [r(3, 3)]),
    (list_pop, [4], [1]),
    (list_pop_index, [[5, 6, 7], 0], [[5, 6, 7, 8], -2]),
    (list_pop_empty, [3], [0]),
    (list_clear, [r(2)], [r(5)]),
    (list_remove, [2], [5]),
    (list_reverse, [[1, 2, 3]], [[4]]),
    (list_sort_ints, [[3, 1, 2]], [[5, -5, 0, 5]]),
    (list_sort_floats, [[0.5, -1.5, 2.0]], [[3.0]]),
    (list_sorted, [[3, 1, 2]], [[9, 8]]),
    (list_sorted_strings, [["b", "a", "c"]], [["zz", "z"]]),
    (list_contains_int, [[1, 2, 3], 2], [[7], 4]),
    (list_contains_str, ["yy"], ["q"]),
    (list_concat, [r(3)], [r(2, 2)]),
    (list_concat_ints, [[1], [2, 3]], [[], []]),
    (list_repeat, [[1, 2], 3], [[5], 0]),
    (list_inplace_add, [[3, 4]], [[]]),
    (list_set_item, [r(2)], [r(1, 3)]),
    (list_del_item, [[1, 2, 3]], [[4]]),
    (list_index_method_and_count, [[1, 2, 3, 2]], [[2]]),
    (list_equality, [[1, 2], [1, 2]], [[1], [2]]),
    (list_min_max_sum, [[3, -1, 7]], [[4]]),
    (list_of_tensors_input, [[r(3), r(3), r(3)]], [[r(2, 2)]]),
    (list_comprehension_tensors, [[r(2), r(3)]], [[r(1, 4), r(2, 4), r(3, 4)]]),
    (list_comprehension_range, [7], [0]),
    (enumerate_loop, [[r(3), r(3)]], [[r(2, 2), r(2, 2), r(2, 2)]]),
    (zip_loop, [[r(3), r(3)], [0.5, 2.0]], [[r(4), r(4), r(4)], [1.0]]),
    (list_of_lists, [3], [0]),
    (list_from_size, [r(2, 3)], [r(4)]),
    (tensor_from_int_list, [[1, 2, 3]], [[7]]),
    (list_returned_and_mutated_after, [r(2)], [r(3, 1)]),
    (list_aliasing_through_append, [r(2)], [r(1, 2)]),
    (list_unpack, [r(3)], [r(2, 2)]),
    (list_unpack_from_input, [[5, 3]], [[1, 2, 3]]),
    (list_unpack_one, [r(1, 3)], [r(1, 2, 2)]),
    (list_unpack_one_from_input, [[r(3)]], [[r(2), r(2)]]),
    (tensor_unbind_list, [r(3, 2)], [r(1, 5)]),
    (iterate_tensor, [r(3, 4)], [r(1, 2)]),
    (list_of_optional, [r(2), True], [r(3), False]),
    (list_mutating_input, [[1, 2, 3]], [[]]),
    (list_mutating_tensor_input_list, [[r(2), r(3)]], [[r(1)]]),
]


# --------------------------------------------------------------------------- dicts


def dict_construct_getitem(x: torch.Tensor):
    d = {"a": x, "b": x * 2}
    return d["a"] + d["b"]


def dict_setitem(x: torch.Tensor):
    d: dict[str, torch.Tensor] = {}
    d["one"] = x
    d["two"] = x + x
    d["one"] = x - 1
    return d


def dict_keys_values_items(x: torch.Tensor):
    d = {"p": x, "q": x + 1, "r": x * 3}
    keys = d.keys()
    vals = torch.stack(d.values())
    total = torch.zeros_like(x)
    for k, v in d.items():
        if k != "q":
            total = total + v
    return keys, vals, total


def dict_contains(k: str):
    d = {"a": 1, "b": 2}
    return k in d, k not in d


def dict_pop(x: torch.Tensor):
    d = {"a": x, "b": x + 1}
    v = d.pop("a")
    w = d.pop("missing", x * 0)
    return v, w, d


def dict_pop_missing(k: str):
    d = {"a": 1}
    return d.pop(k)


def dict_update(x: torch.Tensor):
    d = {"a": x, "b": x + 1}
    d.update({"b": x * 5, "c": x * 7})
    return d


def dict_setdefault(k: str, v: int):
    d = {"a": 1}
    got = d.setdefault(k, v)
    return got, d


def dict_len(d: dict[str, torch.Tensor]):
    return len(d), len({1: 2})


def dict_iteration_order(n: int):
    d: dict[int, int] = {}
    for i in range(n):
        d[(i * 7) % 5] = i
    del_keys: list[int] = []
    for k in d:
        if k % 2 == 0:
            del_keys.append(k)
    for k in del_keys:
        del d[k]
    d[100] = -1
    return list(d.keys()), list(d.values())


def dict_str_tensor_input(d: dict[str, torch.Tensor]):
    out = torch.zeros(1)
    for k in sorted(d.keys()):
        out = out + d[k].sum() * len(k)
    return out


def dict_int_int_counting(xs: list[int]):
    counts: dict[int, int] = {}
    for x in xs:
        counts[x] = counts.get(x, 0) + 1
    return counts


def dict_get_default(k: str, x: torch.Tensor):
    d = {"a": x}
    got = d.get(k)
    alt = d.get(k, x * -1)
    return got is None, alt


def dict_getitem_missing(k: str):
    d = {"a": 1, "b": 2}
    return d[k]


def dict_clear(x: torch.Tensor):
    d = {"a": x}
    d.clear()
    d["b"] = x + 1
    return d


def dict_comprehension(x: torch.Tensor, n: int):
    d = {i: x * i for i in range(n)}
    return d


def dict_copy_is_independent(x: torch.Tensor):
    d = {"a": x}
    e = d.copy()
    e["b"] = x + 1
    return len(d), len(e)


def dict_returned_nested(x: torch.Tensor):
    d: dict[str, list[torch.Tensor]] = {"xs": [x, x + 1]}
    d["xs"].append(x * 2)
    return d


def dict_mutating_input(d: dict[str, int]):
    d["new"] = 1
    return len(d)


def dict_popitem(n: int):
    d = {"a": n, "b": n + 1}
    k, v = d.popitem()
    return k, v, d


DICT_CASES = [
    (dict_construct_getitem, [r(3)], [r(2, 2)]),
    (dict_setitem, [r(2)], [r(3, 1)]),
    (dict_keys_values_items, [r(2)], [r(1, 3)]),
    (dict_contains, ["a"], ["z"]),
    (dict_pop, [r(2)], [r(4)]),
    (dict_pop_missing, ["a"], ["b"]),
    (dict_update, [r(2)], [r(1)]),
    (dict_setdefault, ["a", 5], ["z", 9]),
    (dict_len, [{"x": r(1), "y": r(2)}], [{}]),
    (dict_iteration_order, [9], [2]),
    (dict_str_tensor_input, [{"bb": r(2), "a": r(3)}], [{"c": r(1)}]),
    (dict_int_int_counting, [[1, 2, 1, 3, 1]], [[]]),
    (dict_get_default, ["a", r(2)], ["b", r(3)]),
    (dict_getitem_missing, ["b"], ["c"]),
    (dict_clear, [r(2)], [r(1, 1)]),
    (dict_comprehension, [r(2), 3], [r(1), 0]),
    (dict_copy_is_independent, [r(2)], [r(3)]),
    (dict_returned_nested, [r(2)], [r(3, 3)]),
    (dict_mutating_input, [{"a": 1}], [{}]),
    (dict_popitem, [1], [5]),
]


# --------------------------------------------------------------------------- tuples


def tuple_construct_index(x: torch.Tensor):
    t = (x, x + 1, 3)
    return t[0] * t[2] + t[1], t[-1]


def tuple_unpack(x: torch.Tensor):
    t = (x, x.sum(0))
    a, b = t
    return a + b


def tuple_nested(x: torch.Tensor):
    t = ((x, x + 1), (x * 2, (x * 3, 5)))
    (a, b), (c, (d, n)) = t
    return a + b + c + d * n, t[1][1][0]


def tuple_returned(x: torch.Tensor, n: int):
    return x * n, n + 1, "s", [n, n]


def tuple_input(t: tuple[torch.Tensor, int]):
    x, n = t
    return x + n


def tuple_slice(x: torch.Tensor):
    t = (x, x + 1, x + 2, 4)
    return t[1:3], t[:-1][0]


def tuple_loop_unrolled(x: torch.Tensor):
    out = x
    for s in (1.0, 2.5, -1.0):
        out = out * s + 1
    return out


def tuple_list_of_tuples(xs: list[tuple[str, int]]):
    total = 0
    names: list[str] = []
    for name, v in xs:
        total += v
        names.append(name)
    return total, names


def tuple_max_min_ops(x: torch.Tensor):
    values, indices = x.max(0)
    return values, indices, x.min(0)


def tuple_equality(a: int, b: int):
    return (a, b) == (1, 2), (a, b) != (3, 4)


def tuple_as_dict_value(x: torch.Tensor):
    d: dict[str, tuple[torch.Tensor, int]] = {"k": (x, 2)}
    t = d["k"]
    return t[0] * t[1]


def tuple_len(x: torch.Tensor):
    t = (x, 1, 2.0)
    return len(t)


TUPLE_CASES = [
    (tuple_construct_index, [r(3)], [r(2, 1)]),
    (tuple_unpack, [r(4, 2)], [r(3, 2)]),
    (tuple_nested, [r(2)], [r(3, 3)]),
    (tuple_returned, [r(2), 3], [r(4), -1]),
    (tuple_input, [(r(2), 3)], [(r(1, 3), 0)]),
    (tuple_slice, [r(2)], [r(1)]),
    (tuple_loop_unrolled, [r(3)], [r(2, 2)]),
    (tuple_list_of_tuples, [[("a", 1), ("b", 2)]], [[]]),
    (tuple_max_min_ops, [r(3, 4)], [r(1, 2)]),
    (tuple_equality, [1, 2], [3, 4]),
    (tuple_as_dict_value, [r(2)], [r(4)]),
    (tuple_len, [r(1)], [r(2)]),
]


def _params(cases):
    return [pytest.param(fn, a, b, id=fn.__name__) for fn, a, b in cases]


@pytest.mark.parametrize("fn,inputs,second", _params(LIST_CASES))
def test_lists(fn, inputs, second):
    check(fn, inputs, second)


@pytest.mark.parametrize("fn,inputs,second", _params(DICT_CASES))
def test_dicts(fn, inputs, second):
    check(fn, inputs, second)


@pytest.mark.parametrize("fn,inputs,second", _params(TUPLE_CASES))
def test_tuples(fn, inputs, second):
    check(fn, inputs, second)


def test_kwargs_and_defaults_with_lists():
    def f(x: torch.Tensor, scales: list[float], n: int = 2):
        out = [x * s for s in scales]
        return out[: n]

    check(f, [r(3), [1.0, 2.0, 3.0]], [r(2), [0.5, 0.25, 4.0]], kwargs={"n": 1})
    check(f, [r(3), [1.0, 2.0, 3.0]], [r(2), [0.5]])


DICT_FROM_SOURCE = """
def f(x: Tensor, keys: List[str]) -> Dict[str, Tensor]:
    d: Dict[str, Tensor] = {}
    for i, k in enumerate(keys):
        d[k] = x + i
    return d
"""


def test_source_compiled_with_list_and_dict():
    fn = torch.jit.CompilationUnit(DICT_FROM_SOURCE).f
    check(fn, [r(2), ["a", "b"]], [r(3), ["z", "a", "q"]])


def test_source_string_with_list_and_dict():
    check(DICT_FROM_SOURCE, [r(2), ["a", "b"]], [r(3), ["z", "a", "q"]])
