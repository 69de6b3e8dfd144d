"""Shape and view operators: view/reshape/flatten/permute/transpose/squeeze/expand/repeat,
chunk/split/unbind, cat/stack over lists built in the graph and over list inputs, flip/roll,
tril/triu, clone/contiguous, dtype conversion, movedim, pad. Views of inputs and of
intermediates are both covered: results that alias an input must not be overwritten."""


import pytest
import torch
import torch.nn.functional as F
from differential import check
from op_cases import Inputs, case, layout, ts

I = Inputs(6)
randn, randint = I.randn, I.randint


def view_shape_from_input(x: torch.Tensor) -> torch.Tensor:
    b = x.size(0)
    return x.view(b, -1)


def view_of_intermediate(x: torch.Tensor) -> torch.Tensor:
    y = x * 2
    z = y.view(-1)
    return z + 1


def view_then_inplace(x: torch.Tensor) -> torch.Tensor:
    y = x + 1
    y.view(-1).mul_(2)  # writes through the view into y
    return y


def reshape_list(x: torch.Tensor, shape: list[int]) -> torch.Tensor:
    return x.reshape(shape)


def permute_compute(x: torch.Tensor) -> torch.Tensor:
    return (x.permute(2, 0, 1) * 2).contiguous()


def squeeze_unsqueeze(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    return x.unsqueeze(0), x.unsqueeze(-1).squeeze(-1), torch.squeeze(x)


def squeeze_dims(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    return x.squeeze(1), x.squeeze([0, 2])


def expand_compute(x: torch.Tensor, n: int) -> torch.Tensor:
    return x.expand(n, -1, -1) + 1


def chunk(x: torch.Tensor) -> list[torch.Tensor]:
    return torch.chunk(x, 3, 1)


def chunk_unpacked(x: torch.Tensor) -> torch.Tensor:
    a, b = x.chunk(2, -1)
    return a * torch.sigmoid(b)


def split_int(x: torch.Tensor) -> list[torch.Tensor]:
    return torch.split(x, 2)


def split_sizes(x: torch.Tensor, sizes: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
    a, b = torch.split(x, sizes, dim=1)
    return a + 1, b * 2


def split_with_sizes(x: torch.Tensor) -> list[torch.Tensor]:
    return x.split_with_sizes([1, 2], 0)


def unbind(x: torch.Tensor) -> list[torch.Tensor]:
    return torch.unbind(x, 1)


def unbind_unpacked(x: torch.Tensor) -> torch.Tensor:
    a, b, c = x.unbind(0)
    return a * b + c


def cat_in_graph(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return torch.cat([x, y * 2, x + y], dim=1)


def cat_dim0_with_views(x: torch.Tensor) -> torch.Tensor:
    return torch.cat([x[1:], x[:1]], 0)


def cat_list_input(xs: list[torch.Tensor]) -> torch.Tensor:
    return torch.cat(xs, -1)


def cat_list_grown(x: torch.Tensor, n: int) -> torch.Tensor:
    parts: list[torch.Tensor] = []
    for i in range(n):
        parts.append(x * i)
    return torch.cat(parts, 0)


def cat_mixed_dtypes(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return torch.cat([x, y])


def stack_in_graph(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return torch.stack([x, y, x - y])


def stack_last_dim(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return torch.stack((x, y), dim=-1)


def stack_list_input(xs: list[torch.Tensor]) -> torch.Tensor:
    return torch.stack(xs, 1)


def hstack_vstack(x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    return torch.hstack([x, y]), torch.vstack([x, y])


def pad_constant(x: torch.Tensor) -> torch.Tensor:
    return F.pad(x, [1, 2], value=-1.0)


def pad_2d(x: torch.Tensor) -> torch.Tensor:
    return F.pad(x, (1, 1, 2, 0))


def pad_reflect(x: torch.Tensor) -> torch.Tensor:
    return F.pad(x, (2, 1), mode="reflect")


def pad_replicate(x: torch.Tensor) -> torch.Tensor:
    return F.pad(x, (1, 1, 1, 1), mode="replicate")


def to_dtype_variants(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    return x.to(torch.int32), x.double(), x.to(dtype=torch.float16)


def to_same_dtype(x: torch.Tensor) -> torch.Tensor:
    return x.to(torch.float32)


def to_same_dtype_copy(x: torch.Tensor) -> torch.Tensor:
    return x.to(torch.float32, copy=True)


def clone_then_inplace(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    y = x.clone()
    y.add_(1)
    return x * 1, y


def contiguous_of_transpose(x: torch.Tensor) -> torch.Tensor:
    return x.t().contiguous().view(-1)


def size_ops(x: torch.Tensor) -> tuple[list[int], int, int, int]:
    return x.size(), x.size(-1), x.dim(), x.numel()


VIEWS = [
    ("view", ts("x", "x.view(-1)"), [randn(3, 4)], [randn(2, 3, 2)]),
    ("view_shape_from_input", view_shape_from_input, [randn(3, 4, 2)], [randn(5, 3)]),
    ("view_of_intermediate", view_of_intermediate, [randn(3, 4)], [randn(7)]),
    ("view_then_inplace", view_then_inplace, [randn(3, 4)], [randn(2, 2)]),
    ("view_noncontiguous_raises", ts("x", "x.t().view(-1)"), [randn(3, 4)], [randn(1, 5)]),
    ("view_dtype", ts("x", "x.view(torch.int32)"), [randn(3, 4)], [randn(5)]),
    ("view_as", ts("x, y", "x.view_as(y)"), [randn(3, 4), randn(2, 6)], [randn(6), randn(3, 2)]),
    ("reshape", ts("x", "x.reshape(2, -1)"), [randn(3, 4)], [randn(2, 3, 5)]),
    ("reshape_noncontiguous", ts("x", "x.t().reshape(-1)"), [randn(3, 4)], [randn(2, 5)]),
    ("reshape_list", reshape_list, [randn(3, 4), [4, 3]], [randn(6), [2, 1, 3]]),
    ("reshape_as", ts("x, y", "x.reshape_as(y) + y"), [randn(3, 4), randn(12)],
     [randn(2, 3), randn(3, 2)]),
    ("flatten", ts("x", "torch.flatten(x)"), [randn(2, 3, 4)], [randn(5)]),
    ("flatten_range", ts("x", "x.flatten(1, 2)"), [randn(2, 3, 4, 5)], [randn(1, 2, 2)]),
    ("unflatten", ts("x", "x.unflatten(1, [2, -1])"), [randn(3, 4)], [randn(2, 6, 1)]),
    ("permute", ts("x", "x.permute(2, 0, 1)"), [randn(2, 3, 4)], [randn(4, 1, 3)]),
    ("permute_compute", permute_compute, [randn(2, 3, 4)], [randn(3, 3, 2)]),
    ("transpose", ts("x", "torch.transpose(x, 0, -1)"), [randn(2, 3, 4)], [randn(5, 2)]),
    ("t", ts("x", "x.t() + 1"), [randn(3, 4)], [randn(5)]),
    ("mT", ts("x", "x.mT"), [randn(2, 3, 4)], [randn(3, 2)]),
    ("squeeze_unsqueeze", squeeze_unsqueeze, [randn(3, 1, 4)], [randn(1, 5)]),
    ("squeeze_dims", squeeze_dims, [randn(1, 1, 1, 4)], [randn(1, 3, 1)]),
    ("expand", expand_compute, [randn(1, 3, 4), 2], [randn(1, 2, 1), 5]),
    ("expand_as", ts("x, y", "x.expand_as(y) * y"), [randn(3, 1), randn(3, 4)],
     [randn(5), randn(2, 5)]),
    ("broadcast_to", ts("x", "torch.broadcast_to(x, [2, 3, 4])"), [randn(3, 1)], [randn(4)]),
    ("repeat", ts("x", "x.repeat(2, 3)"), [randn(3, 4)], [randn(2, 1)]),
    ("repeat_more_dims", ts("x", "x.repeat(2, 1, 2)"), [randn(3, 4)], [randn(5)]),
    ("repeat_interleave", ts("x", "torch.repeat_interleave(x, 2, dim=0)"),
     [randn(3, 4)], [randn(2)]),
    ("tile", ts("x", "torch.tile(x, [2])"), [randn(3, 4)], [randn(5)]),
    ("contiguous", ts("x", "x.contiguous()"), [randn(3, 4)], [randn(2, 5)]),
    ("contiguous_of_transpose", contiguous_of_transpose, [randn(3, 4)], [randn(2, 5)]),
    ("movedim", ts("x", "torch.movedim(x, 0, -1)"), [randn(2, 3, 4)], [randn(5, 1)]),
    ("movedim_lists", ts("x", "x.movedim([0, 1], [2, 0])"), [randn(2, 3, 4)], [randn(1, 5, 2)]),
    ("swapaxes", ts("x", "x.swapaxes(0, 1) * 2"), [randn(2, 3, 4)], [randn(3, 5)]),
    ("unfold", ts("x", "x.unfold(1, 2, 1)"), [randn(3, 4)], [randn(2, 6)]),
    ("diagonal", ts("x", "torch.diagonal(x, 0, -2, -1)"), [randn(2, 3, 3)], [randn(4, 2)]),
    ("select_of_view_input_alias", ts("x", "(x[0], x.view(-1))"), [randn(3, 4)], [randn(2, 2)]),
    ("size_ops", size_ops, [randn(3, 4)], [randn(2, 3, 5)]),
]

SPLITS = [
    ("chunk", chunk, [randn(2, 6)], [randn(3, 7, 2)]),
    ("chunk_unpacked", chunk_unpacked, [randn(3, 4)], [randn(2, 6)]),
    ("split_int", split_int, [randn(5, 3)], [randn(4)]),
    ("split_sizes", split_sizes, [randn(2, 5), [2, 3]], [randn(3, 3, 2), [1, 2]]),
    ("split_with_sizes", split_with_sizes, [randn(3, 4)], [randn(3)]),
    ("tensor_split", ts("x", "torch.tensor_split(x, 3)"), [randn(7, 2)], [randn(4)]),
    ("unbind", unbind, [randn(2, 3, 4)], [randn(3, 2)]),
    ("unbind_unpacked", unbind_unpacked, [randn(3, 4)], [randn(3, 2, 2)]),
]

JOIN = [
    ("cat_in_graph", cat_in_graph, [randn(2, 3), randn(2, 3)], [randn(4, 1), randn(4, 1)]),
    ("cat_dim0_with_views", cat_dim0_with_views, [randn(3, 4)], [randn(5)]),
    ("cat_list_input", cat_list_input, [[randn(2, 3), randn(2, 1)]],
     [[randn(3, 2), randn(3, 2), randn(3, 4)]]),
    ("cat_list_grown", cat_list_grown, [randn(2, 3), 3], [randn(4), 2]),
    ("cat_mixed_dtypes", cat_mixed_dtypes, [randn(2, 3), randint(0, 5, 1, 3)],
     [randn(3), randint(0, 5, 4)]),
    ("cat_with_empty", ts("x", "torch.cat([x, x[:0]], 0)"), [randn(2, 3)], [randn(4)]),
    ("stack_in_graph", stack_in_graph, [randn(2, 3), randn(2, 3)], [randn(4), randn(4)]),
    ("stack_last_dim", stack_last_dim, [randn(2, 3), randn(2, 3)], [randn(5), randn(5)]),
    ("stack_list_input", stack_list_input, [[randn(2, 3), randn(2, 3)]],
     [[randn(4), randn(4), randn(4)]]),
    ("hstack_vstack", hstack_vstack, [randn(2, 3), randn(2, 3)], [randn(1, 4), randn(1, 4)]),
]

OTHERS = [
    ("flip", ts("x", "torch.flip(x, [0])"), [randn(3, 4)], [randn(5, 2, 2)]),
    ("flip_dims", ts("x", "x.flip([0, -1])"), [randn(3, 4)], [randn(2, 5)]),
    ("fliplr", ts("x", "torch.fliplr(x)"), [randn(3, 4)], [randn(2, 5)]),
    ("roll", ts("x", "torch.roll(x, 1, 0)"), [randn(3, 4)], [randn(5)]),
    ("roll_multi", ts("x", "x.roll([1, -2], [0, 1])"), [randn(3, 4)], [randn(2, 5)]),
    ("roll_flat", ts("x", "torch.roll(x, 3)"), [randn(3, 4)], [randn(2, 2)]),
    ("tril", ts("x", "torch.tril(x)"), [randn(3, 4)], [randn(2, 5, 5)]),
    ("triu_diag", ts("x", "x.triu(1)"), [randn(3, 4)], [randn(5, 2)]),
    ("tril_neg_diag_int", ts("x", "torch.tril(x, -1)"), [randint(0, 9, 4, 4)],
     [randint(0, 9, 2, 3)]),
    ("clone", ts("x", "x.clone()"), [randn(3, 4)], [randn(5)]),
    ("clone_noncontiguous", ts("x", "x.t().clone()"), [randn(3, 4)], [randn(2, 5)]),
    ("clone_contiguous_format", ts("x", "x.t().clone(memory_format=torch.contiguous_format)"),
     [randn(3, 4)], [randn(2, 5)]),
    ("clone_then_inplace", clone_then_inplace, [randn(3, 4)], [randn(2)]),
    ("to_dtype_variants", to_dtype_variants, [randn(3, 4) * 10], [randn(5) * 10]),
    ("to_same_dtype_alias", to_same_dtype, [randn(3, 4)], [randn(5)]),
    ("to_same_dtype_copy", to_same_dtype_copy, [randn(3, 4)], [randn(5)]),
    ("to_int_then_math", ts("x", "(x * 4).to(torch.int64) // 3"), [randn(3, 4)], [randn(6)]),
    ("bool_float_int", ts("x", "(x > 0).float() + (x < 0).int()"), [randn(3, 4)], [randn(5)]),
    ("type_as", ts("x, y", "x.type_as(y) + y"), [randint(0, 5, 3, 4), randn(3, 4)],
     [randint(0, 5, 2), randn(2)]),
    ("type_as_same", ts("x, y", "x.type_as(y)"), [randn(3, 4), randn(1)], [randn(5), randn(1)]),
    ("narrow_view", ts("x", "x.narrow(0, 1, 2)"), [randn(3, 4)], [randn(4, 2)]),
    ("pad_constant", pad_constant, [randn(2, 3)], [randn(4)]),
    ("pad_2d", pad_2d, [randn(2, 3, 4)], [randn(1, 2, 3, 2)]),
    ("pad_negative", ts("x", "torch.nn.functional.pad(x, [-1, 1])"), [randn(2, 3)], [randn(5)]),
    ("pad_reflect", pad_reflect, [randn(1, 2, 5)], [randn(2, 1, 3)]),
    ("pad_replicate", pad_replicate, [randn(1, 2, 3, 3)], [randn(2, 1, 2, 4)]),
]

# Results that are views of an intermediate (or the intermediate itself, through a container
# or control flow): the runtime must not keep and overwrite the intermediate.
RETURNED_VIEWS = [(f"returned_{name}", ts(params, body), first, second)
                  for name, params, body, first, second in [
    ("view", "x", "(x * 2).view(-1)", [randn(3, 4)], [randn(5)]),
    ("select", "x", "(x * 2)[0]", [randn(3, 4)], [randn(5, 2)]),
    ("chunk", "x", "torch.chunk(x * 2, 2)", [randn(4, 4)], [randn(6)]),
    ("unbind", "x", "(x * 2).unbind(0)", [randn(2, 4)], [randn(3)]),
    ("expand", "x", "(x * 2).expand(3, -1)", [randn(4)], [randn(1)]),
    ("slice_view_chain", "x", "(x + 1)[1:].t()[0]", [randn(3, 4)], [randn(5, 2)]),
    ("in_tuple", "x", "((x * 2, x), 1)", [randn(2, 4)], [randn(3)]),
    ("in_dict", "x", "{'a': x * 2}", [randn(2, 4)], [randn(3)]),
    ("to_same_dtype", "x", "(x * 2).to(torch.float32)", [randn(3)], [randn(4)]),
    ("contiguous", "x", "(x * 2).contiguous()", [randn(3)], [randn(4)]),
    ("detach", "x", "(x * 2).detach()", [randn(3, 2)], [randn(4)]),
    ("as_strided", "x", "torch.as_strided(x * 2, [2], [1])", [randn(3, 2)], [randn(4)]),
    ("diagonal", "x", "(x * 2).diagonal()", [randn(3, 3)], [randn(2, 4)]),
    ("through_if", "x, c: bool", """
        y = x * 2
        if c:
            z = y
        else:
            z = y + 1
        return z
     """, [randn(3), True], [randn(4), True]),
    ("through_loop", "x, n: int", """
        y = x * 2
        z = x
        for i in range(n):
            z = y
        return z
     """, [randn(3), 2], [randn(4), 1]),
    ("written_through_view", "x", """
        y = x * 2
        v = y[0]
        v.add_(1)
        return y
     """, [randn(3, 2)], [randn(4, 1)]),
]]

# The result's strides follow a transposed input, on every call (see ``op_cases.layout``).
LAYOUT = [(f"layout_{name}", layout(expr), [randn(4, 3)], [randn(6, 5)]) for name, expr in [
    ("clone", "y.clone()"), ("flip", "torch.flip(y, [0])"), ("roll", "torch.roll(y, 1, 0)"),
    ("to_dtype", "y.to(torch.float64)"), ("tril", "torch.tril(y)"),
    ("zeros_like", "torch.zeros_like(y)"), ("full_like", "torch.full_like(y, 2.0)"),
    ("masked_fill", "y.masked_fill(y > 0, 0.0)"),
]]
# A contiguous input first (its result is kept), then a transposed one written into it.
LAYOUT += [(f"layout_after_contiguous_{name}", layout(expr, "x"), [randn(3, 4)],
            [randn(5, 4).t()]) for name, expr in [
    ("clone", "y.clone()"), ("flip", "torch.flip(y, [0])"), ("to_dtype", "y.to(torch.float64)"),
    ("zeros_like", "torch.zeros_like(y)"),
]]

CASES = [case(*c) for c in VIEWS + SPLITS + JOIN + OTHERS + RETURNED_VIEWS + LAYOUT]


@pytest.mark.parametrize("model, first, second, tol", CASES)
def test_shape_view(model, first, second, tol):
    check(model, first, second, **tol)
