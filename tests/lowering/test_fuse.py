"""``fuse_to_static_runtime``: supported regions of a TorchScript module lowered into our
runtime, the rest left to the TorchScript interpreter. Differential against the original
module in the interpreter, on two input sets of different shapes and the first again."""

import copy

import pytest
import torch
from differential import assert_same, script
from torch import nn

import static_runtime as sr
from static_runtime.lowering.fuse import NAMESPACE
from static_runtime.models import MODELS

# ``sr_test_fuse::tally`` writes into its int-list argument: TorchScript can run it, our
# registry cannot (only a native implementation may write into a non-tensor input).
_LIB = torch.library.Library("sr_test_fuse", "DEF")
_LIB.define("tally(int[](a!) seen, Tensor x) -> Tensor")
_LIB.impl("tally", lambda seen, x: x * 2.0, "CompositeExplicitAutograd")


class UnsupportedInTheMiddle(nn.Module):
    def __init__(self):
        super().__init__()
        self.first = nn.Linear(8, 8)
        self.second = nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.relu(self.first(x))
        seen = [h.size(0)]
        h = torch.ops.sr_test_fuse.tally(seen, h)
        return torch.tanh(self.second(h)) + h.sum()


def _differential(original, fused, input_sets):
    oracle = copy.deepcopy(original)
    for xs in input_sets + input_sets[:1]:
        ours_in, ref_in = copy.deepcopy(xs), copy.deepcopy(xs)
        got = fused(*ours_in)
        assert_same(got, oracle(*ref_in))
        assert_same(ours_in, xs, "input (must be unchanged)")


@pytest.mark.parametrize("name", sorted(MODELS))
def test_builtin_models(name):
    spec = MODELS[name]
    scripted = script(spec.build())
    before = str(scripted.graph)
    fused = sr.fuse_to_static_runtime(scripted)
    assert str(scripted.graph) == before, "the module given is not changed"
    report = fused.static_runtime_fusion
    assert report.regions
    for region in report.regions:
        assert region.op in str(fused.graph)
    _differential(scripted, fused, [spec.example_inputs(batch=2, seed=1),
                                    spec.example_inputs(batch=5, seed=2)])


@pytest.mark.parametrize("name", ["mlp", "resnet_small", "control_flow", "class_user"])
def test_whole_graph_becomes_one_region(name):
    fused = sr.fuse_to_static_runtime(script(MODELS[name].build()))
    report = fused.static_runtime_fusion
    assert len(report.regions) == 1 and report.left_to_torchscript == ()
    calls = [n for n in fused.graph.nodes() if n.kind() != "prim::Constant"]
    assert [n.kind() for n in calls] == [report.regions[0].op]


def test_unsupported_operator_splits_the_graph():
    scripted = script(UnsupportedInTheMiddle().eval())
    with pytest.raises(sr.UnsupportedOperatorError, match="sr_test_fuse::tally"):
        sr.StaticModule(scripted)
    fused = sr.fuse_to_static_runtime(scripted)
    report = fused.static_runtime_fusion
    assert report.left_to_torchscript == ("sr_test_fuse::tally",)
    assert len(report.regions) == 2
    assert "aten::linear" in report.regions[0].kinds
    assert "aten::tanh" in report.regions[1].kinds
    kinds = [n.kind() for n in fused.graph.nodes() if n.kind() != "prim::Constant"]
    assert kinds[0].startswith(NAMESPACE) and kinds[-1].startswith(NAMESPACE)
    _differential(scripted, fused, [(torch.randn(3, 8),), (torch.randn(7, 8),)])


def test_lists_built_and_written_in_a_region_stay_in_it():
    def f(x: torch.Tensor, n: int) -> torch.Tensor:
        parts: list[torch.Tensor] = []
        for i in range(n):
            parts.append(x * float(i))
        return torch.cat(parts, 0).relu()

    class M(nn.Module):
        def forward(self, x: torch.Tensor, n: int) -> torch.Tensor:
            return f(x, n)

    scripted = script(M())
    fused = sr.fuse_to_static_runtime(scripted)
    assert len(fused.static_runtime_fusion.regions) == 1
    _differential(scripted, fused, [(torch.randn(2, 3), 3), (torch.randn(4, 5), 1)])


def test_min_nodes_leaves_small_regions_to_torchscript():
    scripted = script(UnsupportedInTheMiddle().eval())
    small = sr.fuse_to_static_runtime(scripted, min_nodes=100)
    assert small.static_runtime_fusion.regions == ()
    _differential(scripted, small, [(torch.randn(3, 8),)])


def test_options_reach_the_regions():
    opts = sr.StaticModuleOptions(executor="interpreter", enable_out_variant=False)
    fused = sr.fuse_to_static_runtime(script(MODELS["mlp"].build()), opts)
    assert all(r.module.options == opts for r in fused.static_runtime_fusion.regions)


def test_torch_jit_save_is_refused_with_the_reason(tmp_path):
    fused = sr.fuse_to_static_runtime(script(MODELS["mlp"].build()))
    with pytest.raises(RuntimeError, match="exist in this process only"):
        torch.jit.save(fused, str(tmp_path / "fused.pt"))
    with pytest.raises(RuntimeError, match="exist in this process only"):
        torch.jit.save(fused, tmp_path.joinpath("buffer").open("wb"))


def test_not_a_script_module():
    with pytest.raises(TypeError, match="torch.jit.script"):
        sr.fuse_to_static_runtime(MODELS["mlp"].build())
