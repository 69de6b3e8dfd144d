"""Differential cases for control flow: ``prim::If`` and ``prim::Loop`` as TorchScript emits
them for ``if``/``else``, ``for``, ``while``, ``break``, ``continue``, early ``return``,
``raise`` and ``assert``, with values carried through loops and branches."""


import pytest
import torch
from differential import check


def r(*shape):
    return torch.randn(*shape)


# --------------------------------------------------------------------------- if


def if_on_tensor_value(x: torch.Tensor):
    if x.sum() > 0:
        return x * 2
    else:
        return x - 1


def if_nested(x: torch.Tensor, n: int):
    if n > 0:
        if bool(x.mean() > 0):
            y = x + n
        else:
            y = x - n
    else:
        if n < -5:
            y = x * 0
        else:
            y = -x
    return y


def if_different_shapes_per_branch(x: torch.Tensor, flag: bool):
    if flag:
        y = x.sum(0)
    else:
        y = torch.cat([x, x], 0)
    return y


def if_different_types_per_branch(x: torch.Tensor, flag: bool) -> torch.Tensor | None:
    if flag:
        return x + 1
    return None


def if_one_branch_assigns(x: torch.Tensor, flag: bool):
    y = x
    if flag:
        y = x * 3
    return y + 1


def if_multiple_outputs(x: torch.Tensor, k: int):
    if k % 2 == 0:
        a, b, c = x, k, "even"
    else:
        a, b, c = x * k, -k, "odd"
    return a, b, c


def if_elif_chain(x: torch.Tensor, k: int):
    if k == 0:
        return torch.relu(x)
    elif k == 1:
        return torch.sigmoid(x)
    elif k == 2:
        return torch.tanh(x)
    else:
        return x


def ternary_expression(x: torch.Tensor, k: int):
    y = x * 2 if k > 0 else x / 2
    z = 1.0 if bool(y.sum() > 0) else -1.0
    return y * z, "pos" if k > 0 else "neg"


def if_on_optional(x: torch.Tensor, bias: torch.Tensor | None):
    if bias is not None and bias.numel() == x.numel():
        return x + bias
    return x


def if_returns_input_itself(x: torch.Tensor, flag: bool):
    if flag:
        return x
    return x.clone()


def if_with_inplace_in_branch(x: torch.Tensor, flag: bool):
    y = x.clone()
    if flag:
        y.add_(1)
    else:
        y.mul_(2)
    return y


def any_all_over_lists(xs: list[int]):
    flags = [x > 0 for x in xs]
    return any(flags), all(flags)


def any_all_on_tensors(x: torch.Tensor):
    if bool(torch.any(x > 1)):
        return x.clamp(max=1.0)
    return x


def early_return(x: torch.Tensor, n: int):
    if n == 0:
        return x
    y = x * n
    if n < 0:
        return -y
    return y + 1


def raise_inside_if(x: torch.Tensor, n: int):
    if n < 0:
        raise ValueError("n must be non-negative")
    return x * n


def raise_on_tensor_condition(x: torch.Tensor):
    if bool(x.isnan().any()):
        raise RuntimeError("nan in input")
    return x + 1


def assert_statement(x: torch.Tensor, n: int):
    assert n > 0, "n must be positive"
    assert x.dim() == 2
    return x.sum(1) * n


# --------------------------------------------------------------------------- loops


def for_range_carrying_tensor(x: torch.Tensor, n: int):
    y = x
    for i in range(n):
        y = y * 0.5 + i
    return y


def for_range_size(x: torch.Tensor):
    out = torch.zeros(x.size(1))
    for i in range(x.size(0)):
        out = out + x[i]
    return out


def for_range_start_stop_step(n: int):
    a: list[int] = []
    for i in range(2, n, 3):
        a.append(i)  # noqa: PERF402 (a loop carrying a list is the point)
    b: list[int] = []
    for i in range(n, 0, -2):
        b.append(i)  # noqa: PERF402
    return a, b


def while_tensor_condition(x: torch.Tensor):
    y = x.abs() + 0.1
    steps = 0
    while bool(y.sum() < 100.0):
        y = y * 2
        steps += 1
    return y, steps


def while_counter(n: int):
    i = 0
    total = 0
    while i < n:
        total += i * i
        i += 1
    return total


def while_true_break(x: torch.Tensor, limit: int):
    i = 0
    while True:
        x = x + 1
        i += 1
        if i >= limit:
            break
    return x, i


def for_break(x: torch.Tensor, n: int):
    y = x
    for i in range(10):
        if i >= n:
            break
        y = y + i
    return y


def for_continue(x: torch.Tensor, n: int):
    y = torch.zeros_like(x)
    for i in range(n):
        if i % 2 == 1:
            continue
        y = y + x * i
    return y


def loop_appending_to_list(x: torch.Tensor, n: int):
    outs: list[torch.Tensor] = []
    for i in range(n):
        outs.append(x * i)
    return outs


def loop_over_list_of_tensors(xs: list[torch.Tensor]):
    total = torch.zeros(1)
    count = 0
    for t in xs:
        total = total + t.sum()
        count += t.numel()
    return total, count


def nested_loops(x: torch.Tensor, n: int, m: int):
    y = x
    for i in range(n):
        for j in range(m):
            y = y + i * j
        y = y * 0.5
    return y


def triple_nested_with_break(n: int):
    hits: list[int] = []
    for i in range(n):
        for j in range(n):
            if j > i:
                break
            for k in range(j):
                hits.append(i * 100 + j * 10 + k)
    return hits


def zero_trip_loop(x: torch.Tensor, n: int):
    y = x + 1
    acc: list[torch.Tensor] = []
    for i in range(n):
        y = y * 2
        acc.append(y)
    return y, len(acc)


def growing_cat(x: torch.Tensor, n: int):
    y = x
    for _ in range(n):
        y = torch.cat([y, y[-1:] + 1], 0)
    return y


def growing_slices(x: torch.Tensor):
    outs: list[torch.Tensor] = []
    for i in range(1, x.size(0) + 1):
        outs.append(x[:i].sum(0))
    return torch.stack(outs)


def fibonacci_swap(n: int):
    a, b = 0, 1
    for _ in range(n):
        a, b = b, a + b
    return a


def loop_carrying_scalars(x: torch.Tensor, n: int):
    s = 0.0
    k = 1
    for i in range(n):
        s = s + float(x[i % x.size(0)].sum())
        k = k * 2
    return s, k


def loop_over_tensor_rows(x: torch.Tensor):
    best = -1.0
    for row in x:
        v = float(row.max())
        best = max(best, v)
    return best


def loop_over_dict_items(d: dict[str, torch.Tensor]):
    out: dict[str, torch.Tensor] = {}
    for k, v in d.items():
        if k.startswith("w"):
            out[k] = v * 2
    return out


def loop_with_raise(xs: list[int]):
    total = 0
    for x in xs:
        if x < 0:
            raise ValueError("negative")
        total += x
    return total


def loop_trip_count_from_tensor(x: torch.Tensor):
    n = int(x.abs().sum().clamp(max=5.0))
    y = torch.zeros(2)
    for i in range(n):
        y = y + i
    return y, n


def loop_with_inplace_accumulator(x: torch.Tensor, n: int):
    acc = torch.zeros_like(x)
    for i in range(n):
        acc.add_(x * i)
    return acc


def loop_if_inside_loop(x: torch.Tensor, n: int):
    y = x
    for i in range(n):
        if i % 3 == 0:
            y = torch.relu(y) - 0.5
        elif i % 3 == 1:
            y = y * -1
        else:
            y = y.t().t() + 0.1
    return y


def enumerate_with_early_exit(xs: list[torch.Tensor], threshold: float):
    found = -1
    for i, t in enumerate(xs):
        if float(t.sum()) > threshold:
            found = i
            break
    return found


def loop_output_unused_by_later(x: torch.Tensor, n: int):
    # The loop's carried tensor and the value after it share nothing but the input.
    y = x
    for _ in range(n):
        y = y + 1
    z = x * 3
    return z, y


def list_comprehension_with_if_expr(x: torch.Tensor, n: int):
    return [x * i if i % 2 == 0 else x - i for i in range(n)]


def loop_returning_list_of_lists(n: int):
    rows: list[list[int]] = []
    for i in range(n):
        row: list[int] = []
        for j in range(i):
            row.append(j)  # noqa: PERF402
        rows.append(row)
    return rows


# -- intermediates that reach the output only through a branch or a loop: a runtime that
#    keeps intermediate tensors between calls must see that these escape


def intermediate_escapes_through_if(x: torch.Tensor, flag: bool):
    y = x * 2
    if flag:
        z = y
    else:
        z = y + 1
    return z


def intermediate_escapes_through_zero_trip_loop(x: torch.Tensor, n: int):
    y = x * 2
    for _ in range(n):
        y = y + 1
    return y


def intermediate_escapes_through_list_in_loop(x: torch.Tensor, n: int):
    y = x * 3
    outs: list[torch.Tensor] = []
    for i in range(n):
        if i == 1:
            outs.append(y)
        else:
            outs.append(y + i)
    return outs


def intermediate_escapes_through_dict_in_branch(x: torch.Tensor, flag: bool):
    y = torch.relu(x)
    d: dict[str, torch.Tensor] = {}
    if flag:
        d["y"] = y
    d["z"] = x - 1
    return d


def intermediate_reused_after_loop(x: torch.Tensor, n: int):
    a = x + 1
    b = a * 2
    for _ in range(n):
        b = b + a
    c = b - a
    return c


CASES = [
    (if_on_tensor_value, [torch.ones(3)], [-torch.ones(2, 2)]),
    (if_nested, [r(3), 2], [r(2, 2), -7]),
    (if_different_shapes_per_branch, [r(2, 3), True], [r(2, 3), False]),
    (if_different_types_per_branch, [r(2), True], [r(2), False]),
    (if_one_branch_assigns, [r(2), True], [r(3), False]),
    (if_multiple_outputs, [r(2), 4], [r(3), 3]),
    (if_elif_chain, [r(3), 0], [r(3), 2]),
    (ternary_expression, [r(2), 1], [r(3, 1), -1]),
    (if_on_optional, [r(3), r(3)], [r(2), None]),
    (if_returns_input_itself, [r(2), True], [r(3), False]),
    (if_with_inplace_in_branch, [r(2), True], [r(3), False]),
    (any_all_over_lists, [[1, 2, 3]], [[0, 1]]),
    (any_all_on_tensors, [r(3) * 3], [torch.zeros(2)]),
    (early_return, [r(2), 0], [r(3), -2]),
    (raise_inside_if, [r(2), 3], [r(2), -1]),
    (raise_on_tensor_condition, [r(3)], [torch.tensor([1.0, float("nan")])]),
    (assert_statement, [r(2, 3), 2], [r(2, 3), 0]),
    (for_range_carrying_tensor, [r(3), 4], [r(2, 2), 1]),
    (for_range_size, [r(3, 2)], [r(5, 4)]),
    (for_range_start_stop_step, [10], [1]),
    (while_tensor_condition, [r(3)], [r(2, 5)]),
    (while_counter, [5], [0]),
    (while_true_break, [r(2), 3], [r(3), 1]),
    (for_break, [r(2), 4], [r(3), 20]),
    (for_continue, [r(2), 5], [r(4), 1]),
    (loop_appending_to_list, [r(2), 3], [r(3, 1), 0]),
    (loop_over_list_of_tensors, [[r(2), r(3, 3)]], [[]]),
    (nested_loops, [r(2), 3, 2], [r(3, 3), 2, 0]),
    (triple_nested_with_break, [4], [2]),
    (zero_trip_loop, [r(2), 3], [r(3), 0]),
    (growing_cat, [r(1, 2), 4], [r(3, 1), 0]),
    (growing_slices, [r(3, 2)], [r(5, 1)]),
    (fibonacci_swap, [10], [0]),
    (loop_carrying_scalars, [r(3, 2), 5], [r(1), 2]),
    (loop_over_tensor_rows, [r(4, 3)], [r(1, 5)]),
    (loop_over_dict_items, [{"w1": r(2), "b1": r(2), "w2": r(3)}], [{}]),
    (loop_with_raise, [[1, 2, 3]], [[1, -1]]),
    (loop_trip_count_from_tensor, [torch.tensor([1.5, 0.6])], [torch.tensor([10.0])]),
    (loop_with_inplace_accumulator, [r(3), 3], [r(2, 2), 0]),
    (loop_if_inside_loop, [r(2, 2), 5], [r(3, 3), 2]),
    (enumerate_with_early_exit, [[r(2), r(2) + 5, r(2)], 3.0], [[r(3)], 100.0]),
    (loop_output_unused_by_later, [r(2), 2], [r(3), 0]),
    (list_comprehension_with_if_expr, [r(2), 4], [r(1), 0]),
    (loop_returning_list_of_lists, [4], [0]),
    (intermediate_escapes_through_if, [r(3), True], [r(2, 2), False]),
    (intermediate_escapes_through_zero_trip_loop, [r(3), 0], [r(2), 2]),
    (intermediate_escapes_through_list_in_loop, [r(2), 3], [r(3), 2]),
    (intermediate_escapes_through_dict_in_branch, [r(2), True], [r(3), False]),
    (intermediate_reused_after_loop, [r(2), 2], [r(4, 1), 0]),
]


@pytest.mark.parametrize("fn,inputs,second",
                         [pytest.param(fn, a, b, id=fn.__name__) for fn, a, b in CASES])
def test_control_flow(fn, inputs, second):
    check(fn, inputs, second)


def test_loop_with_kwargs_and_defaults():
    def f(x: torch.Tensor, n: int = 3, scale: float = 0.5, reverse: bool = False):
        ys: list[torch.Tensor] = []
        for i in range(n):
            ys.append(x * (scale ** i))
        if reverse:
            ys.reverse()
        return torch.stack(ys)

    check(f, [r(2)], [r(3, 1)])
    check(f, [r(2)], [r(3, 1)], kwargs={"n": 1, "reverse": True})
    check(f, [r(2), 4], [r(1), 2], kwargs={"scale": 2.0})


def test_loop_in_ir_text():
    ir = """graph(%x : Tensor, %n : int):
  %true : bool = prim::Constant[value=1]()
  %one : int = prim::Constant[value=1]()
  %y : Tensor = prim::Loop(%n, %true, %x)
    block0(%i : int, %acc : Tensor):
      %acc2 : Tensor = aten::add(%acc, %acc, %one)
      -> (%true, %acc2)
  return (%y)
"""
    check(ir, [r(2), 3], [r(3, 3), 0])


def test_while_loop_condition_in_ir_text():
    # A loop whose condition is computed by the body (a ``while``), max trip count huge.
    ir = """graph(%x : Tensor, %limit : float):
  %true : bool = prim::Constant[value=1]()
  %big : int = prim::Constant[value=9223372036854775807]()
  %two : int = prim::Constant[value=2]()
  %none : NoneType = prim::Constant()
  %y : Tensor = prim::Loop(%big, %true, %x)
    block0(%i : int, %acc : Tensor):
      %acc2 : Tensor = aten::mul(%acc, %two)
      %s : Tensor = aten::sum(%acc2, %none)
      %sf : float = aten::Float(%s)
      %go : bool = aten::lt(%sf, %limit)
      -> (%go, %acc2)
  return (%y)
"""
    check(ir, [torch.ones(2), 50.0], [torch.ones(3, 3), 1.0])
