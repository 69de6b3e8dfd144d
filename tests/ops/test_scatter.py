"""``aten::index_add_`` chosen by measurement (``ops/scatter.py``): with either kernel forced it
equals eager on two shape sets — indices named twice, a routing that sends no row, a tensor
written in place that the caller sees —; an index out of range raises ATen's error and leaves
what eager leaves; what our kernel does not take runs ``index_add_``."""

import pytest
import torch
from measured import MEASURE, fresh_kernel_cache, needs_ckernels  # noqa: F401
from torch import Tensor, nn

import static_runtime as sr
from static_runtime.ops.kernels import Choice, KernelChooser

pytestmark = needs_ckernels


class Routed(nn.Module):
    """Each expert's output added back at its tokens' rows, as a mixture of experts does."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.experts = nn.ModuleList([nn.Linear(24, 24) for _ in range(3)])

    def forward(self, x: Tensor, chosen: Tensor) -> Tensor:
        out = torch.zeros_like(x)
        for e, expert in enumerate(self.experts):
            rows = torch.where(chosen == e)[0]
            if rows.numel() > 0:
                out.index_add_(0, rows, expert(x[rows]))
        return out


def into(target: Tensor, index: Tensor, source: Tensor) -> Tensor:
    return target.index_add_(0, index, source)


@pytest.fixture(params=["native", "aten"])
def forced(request, monkeypatch):
    monkeypatch.setattr(KernelChooser, "choose",
                        lambda self, key, names, make, default: Choice(request.param, {},
                                                                       "forced"))
    return request.param


def test_experts_adding_back_at_their_rows_answer_as_eager(forced):
    model = Routed().eval()
    mod = sr.StaticModule(torch.jit.script(model), MEASURE)
    for tokens, routing in ((6, [0, 2, 2, 0, 1, 0]), (9, [1] * 9), (4, [2, 0, 0, 2])):
        x, chosen = torch.randn(tokens, 24), torch.tensor(routing)
        before = x.clone()
        want = model(x, chosen)
        for _ in range(2):
            torch.testing.assert_close(mod(x, chosen), want, rtol=1e-5, atol=1e-5)
        assert torch.equal(x, before)
    assert f": {forced} (forced)" in mod.describe()


def test_a_target_written_in_place_is_the_callers_and_indices_accumulate(forced):
    fn = torch.jit.script(into)
    mod = sr.StaticModule(fn, MEASURE)
    for shape, index in (((5, 3, 4), [4, 0, 4, 2]), ((7, 16), [6, 6, 6])):
        target = torch.randn(shape)
        source = torch.randn(len(index), *shape[1:])
        ours, eager = target.clone(), target.clone()
        got = mod(ours, torch.tensor(index), source)
        into(eager, torch.tensor(index), source)
        assert torch.equal(ours, eager)  # (the same additions in the same order)
        assert torch.equal(got, eager)


def test_an_index_out_of_range_raises_atens_error_and_leaves_what_eager_leaves(forced):
    mod = sr.StaticModule(torch.jit.script(into), MEASURE)
    mod(torch.zeros(3, 4), torch.tensor([0, 2]), torch.ones(2, 4))  # (decides the kernel)
    for bad in ([1, 3], [-1, 0]):
        ours, eager = torch.zeros(3, 4), torch.zeros(3, 4)
        with pytest.raises(RuntimeError, match="out of bounds"):
            into(eager, torch.tensor(bad), torch.ones(2, 4))
        with pytest.raises(RuntimeError, match="out of bounds"):
            mod(ours, torch.tensor(bad), torch.ones(2, 4))
        assert torch.equal(ours, eager)  # (ours checks every index first; ATen then raises)


def test_what_our_kernel_does_not_take_runs_index_add(forced):
    mod = sr.StaticModule(torch.jit.script(into), MEASURE)
    for target, index, source in (
            (torch.zeros(4, 6).t(), torch.tensor([1, 5]), torch.ones(2, 4)),  # strided
            (torch.zeros(4, 3, dtype=torch.float64), torch.tensor([0]),
             torch.ones(1, 3, dtype=torch.float64)),
            (torch.zeros(4, 3), torch.tensor([0, 1], dtype=torch.int32), torch.ones(2, 3))):
        eager = target.clone()
        into(eager, index, source)
        torch.testing.assert_close(mod(target.clone(), index, source), eager)


def test_an_empty_index_adds_nothing(forced):
    mod = sr.StaticModule(torch.jit.script(into), MEASURE)
    for rows in (5, 0, 3):
        target = torch.randn(4, 6)
        index = torch.randint(0, 4, (rows,))
        source = torch.randn(rows, 6)
        eager = target.clone()
        into(eager, index, source)
        assert torch.equal(mod(target, index, source), eager)
