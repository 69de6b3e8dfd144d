"""Constant-aware operator selection: linear with a constant weight runs as addmm."""

import torch
from differential import check

import static_runtime as sr


class Linear(torch.nn.Module):
    def __init__(self, bias: bool):
        super().__init__()
        self.lin = torch.nn.Linear(8, 5, bias=bias)

    def forward(self, x):
        return self.lin(x) * 2


def test_constant_weight_linear_uses_addmm_and_mm():
    for bias, label in ((True, "torch.addmm"), (False, "torch.mm")):
        mod = sr.StaticModule(torch.jit.script(Linear(bias)))
        lines = [ln for ln in mod.describe().splitlines() if ln.startswith("aten::linear")]
        assert lines and label in lines[0]


def test_results_equal_for_2d_and_other_ranks():
    for bias in (True, False):
        check(Linear(bias), [torch.randn(3, 8)], [torch.randn(2, 4, 8)])
        check(Linear(bias), [torch.randn(8)], [torch.randn(1, 8)])


def test_planning_ahead_on_meta_tensors_still_works():
    scripted = torch.jit.script(Linear(True))
    mod = sr.StaticModule(scripted, example_inputs=(torch.randn(3, 8),))
    assert mod.ahead_of_time_error is None
    x = torch.randn(3, 8)
    torch.testing.assert_close(mod(x), scripted(x))
