"""``unroll_loops`` (``passes/unroll.py``): a loop of a few trips fixed by a constant — a
``for`` over ``range(constant)``, with or without ``break`` — becomes its trips' copies, each
with a constant counter, so that selections of stacked constant weights fold to constant views
and their products get constant weights; results equal TorchScript's whatever the trip a
``break`` stops at; loops of too many trips, or of trips the input decides, stay loops."""

import io

import torch
from differential import assert_same, check, script
from passes_helpers import ir, kinds, run_graph, run_pass
from torch import Tensor, nn

import static_runtime as sr
from static_runtime.passes import unroll


class Cascade(nn.Module):
    """Stacked stage weights indexed by the counter; stops at the first confident stage."""

    def __init__(self, stages: int = 3, dim: int = 16):
        super().__init__()
        torch.manual_seed(0)
        self.weight = nn.Parameter(torch.randn(stages, dim, dim) / dim ** 0.5)
        self.bias = nn.Parameter(torch.randn(stages, dim) * 0.1)
        self.stages = stages

    def forward(self, x: Tensor, threshold: float) -> tuple[Tensor, int]:
        h = x
        depth = 0
        for k in range(self.stages):
            h = torch.tanh(nn.functional.linear(h, self.weight[k], self.bias[k]))
            depth += 1
            if bool(h.abs().mean() < threshold):
                break
        return h, depth


def _loops(mod: sr.StaticModule) -> int:
    return kinds(mod.graph).count("prim::Loop")


def test_a_cascade_with_break_unrolls_and_answers_as_torchscript_at_every_depth():
    model = Cascade().eval()
    mods = check(model, (torch.randn(4, 16), 2.0), (torch.randn(7, 16), 0.0))
    assert _loops(mods["default"]) == 0
    assert "aten::select" not in kinds(mods["default"].graph)  # the stacked weights folded
    assert _loops(mods["plain"]) == 1
    # every depth the break can stop at: thresholds 2.0 (first stage), 0.0 (never), between
    mod = mods["default"]
    reference = script(model)
    x = torch.randn(5, 16)
    depths = set()
    for threshold in (2.0, 0.0, 0.4, 0.6, 0.8, 1.0):
        got, want = mod(x, threshold), reference(x, threshold)
        torch.testing.assert_close(got[0], want[0])
        assert got[1] == want[1]
        depths.add(want[1])
    assert len(depths) >= 2, depths


def test_folded_stage_weights_are_views_of_the_stacked_constant_and_survive_save_and_load(
        tmp_path):
    model = Cascade().eval()
    mod = sr.StaticModule(script(model))
    x = torch.randn(3, 16)
    expected = script(model)(x, 0.0)
    views = [n.attrs["value"] for n in mod.graph.walk() if n.kind == "prim::Constant"
             and isinstance(n.attrs.get("value"), torch.Tensor)
             and n.attrs["value"].shape == (16, 16)]
    assert len(views) == 3  # one per stage, each a view of the one stacked weight
    assert len({v.untyped_storage().data_ptr() for v in views}) == 1
    path = tmp_path / "cascade.srm"
    mod.save(path)
    loaded = sr.load(path)
    for got in (mod(x, 0.0), loaded(x, 0.0)):
        torch.testing.assert_close(got[0], expected[0])
        assert got[1] == expected[1]


def test_a_loop_without_break_becomes_straight_line_code():
    def f(x: Tensor, w: Tensor) -> list[Tensor]:
        out: list[Tensor] = []
        for i in range(4):
            x = x * w[i] + i
            out.append(x)
        return out

    mods = check(f, (torch.randn(3, 5), torch.randn(4, 5)), (torch.randn(2, 5), torch.randn(4, 5)))
    graph_kinds = kinds(mods["default"].graph)
    assert "prim::Loop" not in graph_kinds and "prim::If" not in graph_kinds


def test_a_counter_stepping_by_two_from_one_bounds_the_trips():
    # k = 1; while k <= 7 (and the sum stays under 100): x = x * 0.5 + k; k += 2 — a loop of
    # unbounded trips whose condition's counter test bounds it to four
    text = """
graph(%x.1 : Tensor):
  %big : int = prim::Constant[value=9223372036854775807]()
  %true : bool = prim::Constant[value=1]()
  %one : int = prim::Constant[value=1]()
  %two : int = prim::Constant[value=2]()
  %seven : int = prim::Constant[value=7]()
  %half : float = prim::Constant[value=0.5]()
  %limit : float = prim::Constant[value=100.]()
  %none : NoneType = prim::Constant()
  %x : Tensor, %k : int = prim::Loop(%big, %true, %x.1, %one)
    block0(%i : int, %x.2 : Tensor, %k.2 : int):
      %h : Tensor = aten::mul(%x.2, %half)
      %x.3 : Tensor = aten::add(%h, %k.2, %one)
      %k.3 : int = aten::add(%k.2, %two)
      %more : bool = aten::le(%k.3, %seven)
      %s : Tensor = aten::sum(%x.3, %none)
      %small : Tensor = aten::lt(%s, %limit)
      %ok : bool = aten::Bool(%small)
      %go : bool = aten::__and__(%more, %ok)
      -> (%go, %x.3, %k.3)
  %out : (Tensor, int) = prim::TupleConstruct(%x, %k)
  return (%out)
"""
    mods = check(text, (torch.randn(3),), (torch.full((4,), 150.0),))
    assert _loops(mods["default"]) == 0
    assert kinds(mods["default"].graph).count("prim::If") == 3  # trips 2, 3 and 4


def test_nested_constant_loops_unroll_inner_first():
    def f(x: Tensor) -> Tensor:
        for i in range(3):
            for j in range(2):
                x = x * 0.9 + (i * 2 + j)
        return x

    mods = check(f, (torch.randn(4),), (torch.randn(2, 3),))
    assert _loops(mods["default"]) == 0


def test_loops_of_many_trips_or_of_trips_from_the_input_stay_loops():
    def many(x: Tensor) -> Tensor:
        for i in range(unroll.MAX_TRIPS + 1):
            x = x + i
        return x

    def from_input(x: Tensor, n: int) -> Tensor:
        for i in range(n):
            x = x * 2.0 + i
        return x

    assert _loops(check(many, (torch.randn(3),), (torch.randn(5),))["default"]) == 1
    mods = check(from_input, (torch.randn(3), 3), (torch.randn(5), 0))
    assert _loops(mods["default"]) == 1


def test_switched_off_the_loop_stays():
    mod = sr.StaticModule(script(Cascade().eval()), sr.StaticModuleOptions(unroll_loops=False))
    assert _loops(mod) == 1
    assert "aten::select" in kinds(mod.graph)


def test_a_stacked_constant_written_through_its_selection_is_not_folded():
    # each trip doubles row i of a constant in place and adds it: the selection must stay a
    # node, so that the write reaches the constant as it did (two runs see it doubled twice)
    text = """
graph(%x.1 : Tensor):
  %w : Tensor = prim::Constant[value=<ref w>]()
  %two_trips : int = prim::Constant[value=2]()
  %true : bool = prim::Constant[value=1]()
  %zero : int = prim::Constant[value=0]()
  %one : int = prim::Constant[value=1]()
  %two : float = prim::Constant[value=2.]()
  %x : Tensor = prim::Loop(%two_trips, %true, %x.1)
    block0(%i : int, %x.2 : Tensor):
      %row : Tensor = aten::select.int(%w, %zero, %i)
      %doubled : Tensor = aten::mul_.Scalar(%row, %two)
      %x.3 : Tensor = aten::add.Tensor(%x.2, %row, %one)
      -> (%true, %x.3)
  return (%x)
"""
    w = torch.randn(2, 3)
    before, after = ir(text, {"w": w.clone()}), ir(text, {"w": w.clone()})
    assert run_pass("unroll_loops", after)
    assert "prim::Loop" not in kinds(after) and kinds(after).count("aten::select") == 2
    x = torch.randn(3)
    for _ in range(2):
        assert_same(run_graph(after, x.clone()), run_graph(before, x.clone()))


def test_module_state_is_unrolled_without_copying_its_storage():
    model = Cascade(stages=4, dim=64).eval()
    mod = sr.StaticModule(script(model))
    buffer = io.BytesIO()
    torch.save([n.attrs["value"] for n in mod.graph.walk() if n.kind == "prim::Constant"
                and isinstance(n.attrs.get("value"), torch.Tensor)], buffer)
    # the four stage weights are views of one stack: saved once (~64 KiB), not twice
    assert buffer.tell() < 2 * 4 * 64 * 64 * 4
