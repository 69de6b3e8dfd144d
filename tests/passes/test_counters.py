"""``scalarize_loop_counters``: the 0-dim int64 tensor counter of an exported ``while_loop``
is carried as an int; every use that needs the tensor still gets it; results equal eager."""

import sys
from pathlib import Path

import pytest
import torch
from differential import assert_same
from passes_helpers import ir, run_graph, run_pass
from torch import nn
from torch._higher_order_ops.while_loop import while_loop
from torch.export import Dim

import static_runtime as sr
from static_runtime.ir.verifier import verify
from static_runtime.models.export import export_case

sys.path.insert(0, str(Path(__file__).parents[1] / "frontend"))
from eager_check import check_eager

OFF = sr.StaticModuleOptions(scalarize_loop_counters=False)


def _loop_types(mod: sr.StaticModule) -> list[str]:
    loop = next(n for n in mod.graph.walk() if n.kind == "prim::Loop")
    return [str(v.type) for v in loop.blocks[0].inputs]


def _tensor_compares(mod: sr.StaticModule) -> int:
    """Conditions read from a tensor: ``aten::Bool``, or the node ``fuse_scalar_compare``
    makes of it and a comparison with a constant."""
    return sum(n.kind in ("aten::Bool", "static_runtime::compare_scalar")
               for n in mod.graph.walk())


def test_exported_control_flow_counts_in_ints():
    model, example, dynamic = export_case("control_flow", batch=2)
    ep = torch.export.export(model, example, dynamic_shapes=dynamic)
    gen = torch.Generator().manual_seed(3)
    sets = [(torch.randn(b, 32, generator=gen), steps) for b, steps in
            ((3, 8), (1, 0), (5, 1), (2, 13))]
    mods = check_eager(lambda opts: sr.StaticModule(ep, options=opts), model, sets,
                       options={"default": sr.StaticModuleOptions(verify_memory_plans=True),
                                "interpreter": sr.StaticModuleOptions(executor="interpreter"),
                                "off": OFF},
                       rtol=1e-4, atol=1e-5)
    verify(mods["default"].graph)
    assert _loop_types(mods["default"]) == ["int", "int", "Tensor"]
    # only the data-dependent branch's test stays a tensor comparison
    assert _tensor_compares(mods["default"]) == 1
    assert _loop_types(mods["off"]) == ["int", "Tensor", "Tensor"]


class _Counted(nn.Module):
    """``h`` updated ``n`` times by a while_loop whose counter is also used as described by
    ``use``."""

    def __init__(self, use: str):
        super().__init__()
        self.use = use
        self.lin = nn.Linear(8, 8)

    def forward(self, x, n):
        use = self.use
        start = x.sum().to(torch.int64) * 0 if use == "start-from-input" \
            else torch.zeros((), dtype=torch.int64)

        def cond(i, prev, h):
            return i < n if use != "combined-compare" else (i < n) & (i < 100)

        def body(i, prev, h):
            step = i + 1
            scale = step.to(torch.float32) if use != "int-scaled" else step
            h = torch.tanh(self.lin(h)) * scale / n
            return step, i + 0 if use == "counter-in-other-slot" else prev + 1, h

        i, prev, h = while_loop(cond, body, (start, torch.zeros((), dtype=torch.int64), x))
        if use == "counter-returned":
            return h, i
        return h, prev


@pytest.mark.parametrize("use,scalarized", [
    ("int-scaled", True),             # tanh(...) * (i + 1): the int64 tensor rebuilt for it
    ("float-scaled", True),           # (i + 1).to(float32)
    ("counter-in-other-slot", True),  # i + 0 carried in another slot: a tensor there
    ("combined-compare", True),       # (i < n) & (i < 100): tensor comparisons kept
    ("counter-returned", False),      # the loop's final counter is used
    ("start-from-input", False),      # not a constant initial value
])
def test_counter_uses_keep_their_meaning(use, scalarized):
    model = _Counted(use).eval()
    x = torch.randn(2, 8)
    ep = torch.export.export(model, (x, 4), dynamic_shapes=({0: Dim("b", min=1, max=64)},
                                                            Dim.DYNAMIC))
    gen = torch.Generator().manual_seed(7)
    sets = [(torch.randn(3, 8, generator=gen), 5), (torch.randn(1, 8, generator=gen), 0),
            (torch.randn(2, 8, generator=gen), 2)]
    mods = check_eager(lambda opts: sr.StaticModule(ep, options=opts), model, sets,
                       rtol=1e-4, atol=1e-5)
    for mod in mods.values():
        verify(mod.graph)
    counter = _loop_types(mods["default"])[1]
    assert counter == ("int" if scalarized else "Tensor")


LOOP = """
graph(%n : int, %h : Tensor):
  %zero : Tensor = prim::Constant[value=<ref zero>]()
  %one : int = prim::Constant[value=1]()
  %big : int = prim::Constant[value=9223372036854775807]()
  %lt0 : Tensor = aten::lt.Scalar(%zero, %n)
  %go : bool = aten::Bool.Tensor(%lt0)
  %i_end : Tensor, %h_end : Tensor = prim::Loop(%big, %go, %zero, %h)
    block0(%t : int, %i : Tensor, %h1 : Tensor):
      %i2 : Tensor = static_runtime::add.Tensor(%i, %one)
      %h2 : Tensor = aten::mul.Tensor(%h1, %i2)
      WRITE
      %c : Tensor = aten::lt.Scalar(%i2, %n)
      %more : bool = aten::Bool.Tensor(%c)
      -> (%more, %i2, %h2)
  return (%h_end)
"""


@pytest.mark.parametrize("write,scalarized", [
    ("", True),
    ("%h3 : Tensor = aten::mul_.Tensor(%h2, %i)", False),  # a write in the body: left alone
])
def test_ir_loop_counter(write, scalarized):
    text = LOOP.replace("WRITE", write)
    zero = {"zero": torch.zeros((), dtype=torch.int64)}
    before, after = ir(text, zero), ir(text, zero)
    assert run_pass("scalarize_loop_counters", after) is True  # the entry test, at least
    loop = next(n for n in after.walk() if n.kind == "prim::Loop")
    assert str(loop.blocks[0].inputs[1].type) == ("int" if scalarized else "Tensor")
    for n in (0, 1, 4):
        h = torch.tensor([1.0, -2.0, 0.5])
        assert_same(run_graph(after, n, h.clone()), run_graph(before, n, h.clone()))
