"""Which out-variant outputs the runtime keeps between calls, and that keeping them is safe."""


import torch
from differential import check, script

import static_runtime as sr


def kept_kinds(fn) -> list[str]:
    mod = sr.StaticModule(script(fn))
    return [pn.kind for pn in mod.plan.nodes() if pn.managed]


def test_intermediates_are_kept_outputs_are_not():
    def f(x: torch.Tensor):
        a = torch.exp(x)
        b = torch.sigmoid(a)
        return torch.tanh(b)

    assert kept_kinds(f) == ["aten::exp", "aten::sigmoid"]


def test_value_viewed_by_an_output_is_not_kept():
    def f(x: torch.Tensor):
        a = torch.exp(x)
        return a.view(-1)

    assert kept_kinds(f) == []
    check(f, [torch.randn(2, 3)], [torch.randn(4, 5)])


def test_value_returned_inside_a_container_is_not_kept():
    def f(x: torch.Tensor) -> tuple[torch.Tensor, list[torch.Tensor]]:
        a = torch.exp(x)
        b = torch.sigmoid(x)
        return torch.tanh(x), [a, b]

    assert kept_kinds(f) == []
    check(f, [torch.randn(2, 3)], [torch.randn(4, 5)])


def test_value_returned_inside_a_dict_is_not_kept():
    def f(x: torch.Tensor) -> dict[str, torch.Tensor]:
        a = torch.exp(x)
        return {"a": a, "b": a + 1}

    assert "aten::exp" not in kept_kinds(f)
    check(f, [torch.randn(3)], [torch.randn(5)])


def test_value_stored_on_the_module_is_not_kept():
    class M(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.last = torch.zeros(1)

        def forward(self, x):
            a = torch.exp(x)
            self.last = a
            return torch.sigmoid(a)

    scripted = torch.jit.script(M())
    mod = sr.StaticModule(scripted)
    assert not any(pn.managed and pn.kind == "aten::exp" for pn in mod.plan.nodes())
    check(M(), [torch.randn(3)], [torch.randn(5)])


def test_value_passed_through_if_to_output_is_not_kept():
    def f(x: torch.Tensor, c: bool):
        a = torch.exp(x)
        if c:
            y = a
        else:
            y = torch.sigmoid(x)
        return y

    assert "aten::exp" not in kept_kinds(f)
    check(f, [torch.randn(3), True], [torch.randn(5), False])


def test_value_carried_out_of_a_loop_is_not_kept():
    def f(x: torch.Tensor, n: int):
        a = torch.exp(x)
        for _ in range(n):
            a = a * 2
        return a

    assert "aten::exp" not in kept_kinds(f)
    check(f, [torch.randn(3), 0], [torch.randn(5), 2])


def test_kept_outputs_resize_for_new_shapes_and_dtypes():
    def f(x: torch.Tensor):
        return torch.exp(x * 2) + 1

    for opts in (sr.StaticModuleOptions(), sr.StaticModuleOptions(enable_out_variant=False)):
        mod = sr.StaticModule(script(f), options=opts)
        for x in (torch.randn(2, 3), torch.randn(7), torch.arange(6).view(2, 3),
                  torch.randn(2, 3, dtype=torch.float64), torch.randn(4, 4)):
            torch.testing.assert_close(mod(x), torch.exp(x * 2) + 1)


def test_op_returning_its_input_is_not_kept():
    # aten::type_as has no alias annotation but returns `self` when dtypes already match;
    # keeping that result would let the next call overwrite the caller's tensor.
    def f(x: torch.Tensor, y: torch.Tensor):
        return x.type_as(y) * 1

    mod = sr.StaticModule(script(f))
    x, y = torch.randn(3), torch.randn(3)
    before = x.clone()
    mod(x, y)
    mod(torch.randn(3), y)
    torch.testing.assert_close(x, before)


def test_disabling_optimize_memory_keeps_nothing():
    def f(x: torch.Tensor):
        return torch.tanh(torch.exp(x))

    mod = sr.StaticModule(script(f), options=sr.StaticModuleOptions(optimize_memory=False))
    assert not any(pn.managed for pn in mod.plan.nodes())
    assert mod.tier_counts()["out variant"] == 2


def test_kept_tensor_is_written_in_place_across_calls():
    def f(x: torch.Tensor):
        return torch.tanh(torch.exp(x))

    mod = sr.StaticModule(script(f))
    rt = mod.runtime()
    slot = mod.plan.managed_slots[0]
    rt(torch.randn(8))  # records sizes, then plans
    first = rt._interp.values[slot]
    ptr = first.data_ptr()
    rt(torch.randn(8))
    assert rt._interp.values[slot] is first and first.data_ptr() == ptr
