"""``fuse_scalar_compare`` (``passes/conditions.py``) and the node it makes
(``ops/native/conditions.py``): ``bool(x < c)`` for a constant number ``c`` becomes one node
that gives ATen's answer for every dtype, value and constant — rounding, NaN, infinities,
integer ranges — and ATen's error for a tensor of other than one element; near misses are
left alone; models that branch and loop on such conditions equal TorchScript."""

import math
import re

import pytest
import torch
from differential import check, script
from torch import nn

import static_runtime as sr

OPS = {"lt": "<", "le": "<=", "gt": ">", "ge": ">=", "eq": "==", "ne": "!="}
CONSTANTS = [0.001, 0, 1, -1, 300, 1e6, 0.1, True, 2**40, -0.0, 1.5]
DTYPES = [torch.float16, torch.bfloat16, torch.float32, torch.float64, torch.int8,
          torch.uint8, torch.int32, torch.int64, torch.bool]
VALUES = [0.001, 0.1, 1.0, 1.5, -1.0, 0.0, -0.0, 299.9, 300.0, 44.0, 1e6, 65504.0,
          math.nan, math.inf, -math.inf, 2.0**40, 1.0001, 127.0]


def _condition(op: str, constant) -> torch.jit.ScriptFunction:
    cu = torch.jit.CompilationUnit(f"def f(x):\n    return bool(x {OPS[op]} {constant!r})\n")
    return cu.f


def _compare_node(fn) -> tuple[list[str], object]:
    mod = sr.StaticModule(fn)
    nodes = list(mod.plan.nodes())
    found = [pn for pn in nodes if pn.kind == "static_runtime::compare_scalar"]
    return [pn.kind for pn in nodes], (found[0].impl.fn if found else None)


def _tensor(value: float, dtype: torch.dtype) -> torch.Tensor:
    if dtype.is_floating_point:
        return torch.tensor(value, dtype=dtype)
    if math.isnan(value) or math.isinf(value):
        return torch.tensor(1, dtype=dtype)
    return torch.tensor(value).to(dtype)  # (wraps as a cast does: any value will do)


@pytest.mark.parametrize("op", list(OPS))
def test_every_dtype_value_and_constant_gives_atens_answer(op):
    aten = getattr(torch, op)
    for constant in CONSTANTS:
        kinds, fn = _compare_node(_condition(op, constant))
        assert fn is not None and "aten::Bool" not in kinds, kinds
        for dtype in DTYPES:
            for value in VALUES:
                for shape in ((), (1,), (1, 1)):
                    x = _tensor(value, dtype).reshape(shape)
                    before = x.clone()
                    expected = bool(aten(x, constant))
                    assert fn(x, constant, op) is expected, (op, constant, dtype, value, shape)
                    torch.testing.assert_close(x, before, rtol=0, atol=0, equal_nan=True)


@pytest.mark.parametrize("numel", [0, 2])
def test_a_tensor_of_other_than_one_element_raises_atens_error(numel):
    fn = _condition("gt", 0.5)
    mod = sr.StaticModule(fn)
    x = torch.ones(numel)
    with pytest.raises(RuntimeError) as eager:
        bool(x > 0.5)
    with pytest.raises(RuntimeError, match=re.escape(str(eager.value).split("\n")[0])):
        mod(x)


def test_near_misses_are_left_alone():
    def kinds(source: str) -> list[str]:
        graph = sr.prepare(torch.jit.CompilationUnit(source).f)
        return [n.kind for n in graph.walk() if n.kind != "prim::Constant"]

    # the comparison's tensor has another use
    assert "aten::Bool" in kinds("def f(x):\n    c = x > 0.5\n    return bool(c), c\n")
    # a scalar that is not a constant
    assert "aten::Bool" in kinds("def f(x, t: float):\n    return bool(x > t)\n")
    # a comparison of two tensors
    assert "aten::Bool" in kinds("def f(x, y):\n    return bool(x > y)\n")
    assert "static_runtime::compare_scalar" in kinds("def f(x):\n    return bool(x > 0.5)\n")


class Refine(nn.Module):
    """Branches on a mean and stops a loop on a difference, as scripted models do."""

    def __init__(self):
        super().__init__()
        self.w = nn.Linear(8, 8)

    def forward(self, x):
        if x.mean() > 0.0:
            x = x * 2.0
        h = torch.zeros_like(x)
        steps = 0
        for _ in range(20):
            new = torch.tanh(self.w(h) + x)
            delta = (new - h).abs().max()
            h = new
            steps += 1
            if bool(delta < 1e-3):
                break
        return h, steps


def test_branches_and_loops_on_conditions_equal_torchscript():
    model = Refine().eval()
    g = torch.Generator().manual_seed(0)
    first = [torch.randn(1, 8, generator=g) * 0.1]
    second = [torch.randn(5, 8, generator=g) - 1.0]  # the other branch
    mods = check(model, first, second)
    graph = sr.prepare(script(model))
    kinds = [n.kind for n in graph.walk()]
    assert kinds.count("static_runtime::compare_scalar") == 2
    assert "aten::Bool" not in kinds
    off = sr.prepare(script(model), sr.StaticModuleOptions(fuse_scalar_compare=False))
    assert "aten::Bool" in [n.kind for n in off.walk()]
    assert mods
