"""fold_batchnorm: an inference batch norm after a constant-weight convolution is folded
into its weights; results equal the unfolded graph's (and the TorchScript interpreter's)."""

import pytest
import torch
from differential import check
from passes_helpers import NO_PASSES, ir, kinds, run_graph, run_pass

import static_runtime as sr

C = 4


def constants(bias=True, gamma=True):
    g = torch.Generator().manual_seed(3)
    return {
        "w": torch.randn(C, 3, 3, 3, generator=g),
        "b": torch.randn(C, generator=g) if bias else None,
        "gamma": torch.rand(C, generator=g) + 0.5 if gamma else None,
        "beta": torch.randn(C, generator=g),
        "mean": torch.randn(C, generator=g),
        "var": torch.rand(C, generator=g) + 0.1,
    }


def conv_bn(training="False", conv_uses=1, export_form=False):
    bn = ("%y : Tensor, %sm : Tensor, %sv : Tensor = "
          "aten::_native_batch_norm_legit_no_training(%c, %gamma, %beta, %mean, %var, %mom, %eps)"
          if export_form else
          "%y : Tensor = aten::batch_norm(%c, %gamma, %beta, %mean, %var, %training, %mom, "
          "%eps, %cudnn)")
    ret = "%y, %c" if conv_uses == 2 else "%y"
    return f"""
graph(%x : Tensor):
  %w : Tensor = prim::Constant[value=<ref w>]()
  %b : Tensor = prim::Constant[value=<ref b>]()
  %gamma : Tensor = prim::Constant[value=<ref gamma>]()
  %beta : Tensor = prim::Constant[value=<ref beta>]()
  %mean : Tensor = prim::Constant[value=<ref mean>]()
  %var : Tensor = prim::Constant[value=<ref var>]()
  %training : bool = prim::Constant[value={training}]()
  %mom : float = prim::Constant[value=0.1]()
  %eps : float = prim::Constant[value=1e-05]()
  %cudnn : bool = prim::Constant[value=True]()
  %s : int[] = prim::Constant[value=[1, 1]]()
  %p : int[] = prim::Constant[value=[1, 1]]()
  %g : int = prim::Constant[value=1]()
  %c : Tensor = aten::conv2d(%x, %w, %b, %s, %p, %s, %g)
  {bn}
  return ({ret})
"""


def images(*shape):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(sum(shape)))


@pytest.mark.parametrize("export_form", [False, True], ids=["batch_norm", "export"])
@pytest.mark.parametrize("bias", [True, False], ids=["bias", "no_bias"])
def test_folded_and_equal(export_form, bias):
    consts = constants(bias=bias, gamma=not export_form)
    text = conv_bn(export_form=export_form)
    before, after = ir(text, consts), ir(text, consts)
    assert run_pass("fold_batchnorm", after)
    assert kinds(after) == ["aten::conv2d"]
    for x in (images(1, 3, 8, 8), images(3, 3, 5, 7)):
        torch.testing.assert_close(run_graph(after, x.clone()), run_graph(before, x.clone()))
    assert all(c.shape == (C,) for c in (consts["mean"], consts["var"]))  # untouched


@pytest.mark.parametrize("text", [conv_bn(training="True"), conv_bn(conv_uses=2)],
                         ids=["training", "conv_output_used_twice"])
def test_not_folded(text):
    graph = ir(text, constants())
    assert not run_pass("fold_batchnorm", graph)
    assert "aten::batch_norm" in kinds(graph)


class ConvBN(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 6, 3, padding=1)
        self.bn = torch.nn.BatchNorm2d(6)
        self.bn.running_mean.normal_()
        self.bn.running_var.uniform_(0.5, 2.0)

    def forward(self, x):
        return torch.relu(self.bn(self.conv(x)))


def test_module_frozen_without_numerics_folding():
    """TorchScript's freezing with optimize_numerics=False keeps the batch norm: we fold it."""
    frozen = torch.jit.freeze(torch.jit.script(ConvBN().eval()), optimize_numerics=False)
    assert any(n.kind() == "aten::batch_norm" for n in frozen.graph.nodes())
    opts = sr.StaticModuleOptions(freeze=False, verify_memory_plans=True)
    graph = sr.prepare(frozen, opts)
    assert "aten::batch_norm" not in kinds(graph)
    check(frozen, [images(1, 3, 6, 6)], [images(2, 3, 9, 4)],
          options={"folded": opts, "none": NO_PASSES})
    off = sr.prepare(frozen, sr.StaticModuleOptions(freeze=False, fold_batchnorm=False))
    assert "aten::batch_norm" in kinds(off)
