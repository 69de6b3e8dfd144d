"""fold_batchnorm: an inference batch norm after a constant-weight convolution or linear layer
is folded into its weights where that is exact; results equal the unfolded graph's, the
TorchScript interpreter's (unfrozen) and eager PyTorch's."""

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


def _bn_constants(training: str = "False") -> str:
    """IR lines: the layer's weight and bias, the batch norm's parameters and flags."""
    return f"""\
  %w : Tensor = prim::Constant[value=<ref w>]()
  %b : Tensor = prim::Constant[value=<ref b>]()
  %gamma : Tensor = prim::Constant[value=<ref gamma>]()
  %beta : Tensor = prim::Constant[value=<ref beta>]()
  %mean : Tensor = prim::Constant[value=<ref mean>]()
  %var : Tensor = prim::Constant[value=<ref var>]()
  %training : bool = prim::Constant[value={training}]()
  %mom : float = prim::Constant[value=0.1]()
  %eps : float = prim::Constant[value=1e-05]()
  %cudnn : bool = prim::Constant[value=True]()"""


def conv_bn(training="False", conv_uses=1, export_form=False):
    bn = ("%y : Tensor, %sm : Tensor, %sv : Tensor = "
          "aten::_native_batch_norm_legit_no_training(%c, %gamma, %beta, %mean, %var, %mom, %eps)"
          if export_form else
          "%y : Tensor = aten::batch_norm(%c, %gamma, %beta, %mean, %var, %training, %mom, "
          "%eps, %cudnn)")
    ret = "%y, %c" if conv_uses == 2 else "%y"
    return f"""
graph(%x : Tensor):
{_bn_constants(training)}
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
    # the convolution, and the check that its input is a batch (see test_unbatched_refused)
    assert [k for k in kinds(after) if k.startswith("aten::conv")] == ["aten::conv2d"]
    assert not any("batch_norm" in k for k in kinds(after))
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


def test_unbatched_input_refused_after_folding():
    """Folded, the batch norm's channels are the convolution's output channels, which holds
    for a batch; an unbatched image (which ``BatchNorm2d`` refuses too) raises an error
    that says what to do."""
    graph = ir(conv_bn(), constants())
    assert run_pass("fold_batchnorm", graph)
    mod = sr.StaticModule(graph, options=NO_PASSES)
    with pytest.raises(ValueError, match=r"rank 4 \(a batch\); this input has rank 3.*"
                                         r"fold_batchnorm=False"):
        mod(images(3, 6, 6))
    torch.testing.assert_close(mod(images(2, 3, 6, 6)),
                               run_graph(ir(conv_bn(), constants()), images(2, 3, 6, 6)))


F = 6


def linear_constants(bias=True):
    g = torch.Generator().manual_seed(5)
    return {
        "w": torch.randn(F, F, generator=g), "b": torch.randn(F, generator=g) if bias else None,
        "gamma": torch.rand(F, generator=g) + 0.5, "beta": torch.randn(F, generator=g),
        "mean": torch.randn(F, generator=g), "var": torch.rand(F, generator=g) + 0.1,
    }


LINEAR_BN = f"""
graph(%x : Tensor):
{_bn_constants()}
  %h : Tensor = aten::linear(%x, %w, %b)
  %d : int = aten::dim(%h)
  %y : Tensor = aten::batch_norm(%h, %gamma, %beta, %mean, %var, %training, %mom, %eps, %cudnn)
  return (%y, %d)
"""


@pytest.mark.parametrize("bias", [True, False], ids=["bias", "no_bias"])
def test_linear_folded_for_matrices_and_as_was_for_other_ranks(bias):
    """A rank-2 input takes the folded linear; a rank-3 input (whose batch norm normalises
    dim 1, not the linear's features) runs the linear and the batch norm as they were."""
    consts = linear_constants(bias)
    before, after = ir(LINEAR_BN, consts), ir(LINEAR_BN, consts)
    assert run_pass("fold_batchnorm", after)
    branch = next(n for n in after.walk() if n.kind == "prim::If")
    assert [n.kind for n in branch.blocks[0].nodes] == ["aten::linear"]
    assert [n.kind for n in branch.blocks[1].nodes] == ["aten::linear", "aten::batch_norm"]
    g = torch.Generator().manual_seed(1)
    for shape in ((4, F), (1, F), (3, F, F), (2, F, F)):
        x = torch.randn(*shape, generator=g)
        torch.testing.assert_close(run_graph(after, x.clone()), run_graph(before, x.clone()))


def test_linear_with_a_residual_use_not_folded():
    text = LINEAR_BN.replace("return (%y, %d)", "%r : Tensor = aten::add(%h, %y, %mom)\n"
                             "  return (%r)")
    graph = ir(text, linear_constants())
    assert not run_pass("fold_batchnorm", graph)
    assert "aten::batch_norm" in kinds(graph)


def _stats(bn: torch.nn.Module, seed: int) -> None:
    g = torch.Generator().manual_seed(seed)
    n = bn.num_features
    with torch.no_grad():
        bn.running_mean.copy_(torch.randn(n, generator=g) * 2)
        bn.running_var.copy_(torch.rand(n, generator=g) * 2.5 + 0.5)
        bn.weight.copy_(torch.rand(n, generator=g) * 1.5 + 0.5)
        bn.bias.copy_(torch.randn(n, generator=g))


class Residual(torch.nn.Module):
    """``h = layer(x); h + layer2(relu(bn(h)))``: the layer's result feeds the batch norm and
    the sum — the issue's reproduction for linear layers. TorchScript's freezing
    (optimize_numerics=True) folds the batch norm into ``layer`` anyway, so the sum adds the
    normalised ``h`` (frozen TorchScript is 3-4 off here). ``bn_first``: ``h = bn(x); h +
    layer2(relu(layer(h)))``."""

    def __init__(self, layer, layer2, bn, bn_first: bool, seed: int):
        super().__init__()
        self.layer, self.layer2, self.bn = layer, layer2, bn
        self.bn_first = bn_first
        _stats(self.bn, seed)

    def forward(self, x):
        if self.bn_first:
            h = self.bn(x)
            return h + self.layer2(torch.relu(self.layer(h)))
        h = self.layer(x)
        return h + self.layer2(torch.relu(self.bn(h)))


def linear_residual(bn_first: bool) -> Residual:
    return Residual(torch.nn.Linear(16, 16), torch.nn.Linear(16, 16), torch.nn.BatchNorm1d(16),
                    bn_first, seed=0)


def conv_residual(bn_first: bool) -> Residual:
    return Residual(torch.nn.Conv2d(6, 6, 3, padding=1), torch.nn.Conv2d(6, 6, 3, padding=1),
                    torch.nn.BatchNorm2d(6), bn_first, seed=1)


class Chain(torch.nn.Module):
    """Linear → BatchNorm1d → ReLU, twice: both batch norms foldable."""

    def __init__(self):
        super().__init__()
        self.layers = torch.nn.Sequential(
            torch.nn.Linear(16, 16), torch.nn.BatchNorm1d(16), torch.nn.ReLU(),
            torch.nn.Linear(16, 16), torch.nn.BatchNorm1d(16), torch.nn.ReLU())
        _stats(self.layers[1], 2)
        _stats(self.layers[4], 3)

    def forward(self, x):
        return self.layers(x)


@pytest.mark.parametrize("bn_first", [False, True], ids=["bn_after", "bn_before"])
@pytest.mark.parametrize("make,shapes", [
    (linear_residual, ((4, 16), (7, 16))), (conv_residual, ((1, 6, 8, 8), (3, 6, 5, 7)))],
    ids=["linear", "conv"])
def test_residual_patterns_equal_eager(make, shapes, bn_first):
    """Through the whole frontend (freezing included): equal to eager on two shapes, called
    twice each, whichever side of the layer the batch norm is on."""
    model = make(bn_first).eval()
    g = torch.Generator().manual_seed(7)
    inputs = [torch.randn(*s, generator=g) for s in shapes]
    mod = sr.StaticModule(torch.jit.script(model))
    for x in (*inputs, inputs[0]):
        with torch.no_grad():
            expected = model(x)
        for _ in range(2):
            torch.testing.assert_close(mod(x), expected)
    check(model, [inputs[0]], [inputs[1]])


def test_chain_folds_every_batch_norm_and_equals_eager():
    model = Chain().eval()
    mod = sr.StaticModule(torch.jit.script(model))
    assert not any("batch_norm" in n.kind for n in mod.graph.walk()
                   if n.owning_block is mod.graph.block)
    g = torch.Generator().manual_seed(8)
    for rows in (1, 5, 1):
        x = torch.randn(rows, 16, generator=g)
        for _ in range(2):
            torch.testing.assert_close(mod(x), model(x))


class LinearFlattenBN(torch.nn.Module):
    """LeViT's ``MLPLayerWithBN``: a linear layer over (B, N, C) tokens whose batch norm
    (over the features) sees them flattened to a matrix, then shaped back as the product
    (``reshape_as``); ``form`` "reshape" flattens by ``reshape(-1, C)`` instead, "residual"
    adds the product to the result (a second use: not folded)."""

    def __init__(self, form: str):
        super().__init__()
        self.form = form
        self.fc = torch.nn.Linear(6, 8)
        self.bn = torch.nn.BatchNorm1d(8)
        _stats(self.bn, 7)

    def forward(self, x):
        h = self.fc(x)
        if self.form == "reshape":
            return self.bn(h.reshape(-1, 8)).reshape_as(h)
        y = self.bn(h.flatten(0, 1)).reshape_as(h)
        return y + h if self.form == "residual" else y


@pytest.mark.parametrize("form", ["flatten", "reshape", "residual"])
def test_linear_flattened_to_its_features_is_folded(form):
    model = torch.jit.script(LinearFlattenBN(form).eval())
    graph = sr.prepare(model, sr.StaticModuleOptions(fuse_linear_pointwise=False))
    folded = [n.kind for n in graph.walk()]
    if form == "residual":
        assert "aten::batch_norm" in folded
    elif form == "reshape":  # any rank: no rank check of ours, no batch norm left
        assert "aten::batch_norm" not in folded
        assert not any(n.kind == "prim::If" and any(m.kind == "aten::linear"
                                                    for b in n.blocks for m in b.nodes)
                       for n in graph.walk())
    else:  # a rank-3 input takes the folded product; others run it as it was
        branch = next(n for n in graph.walk() if n.kind == "prim::If"
                      and any(m.kind == "aten::batch_norm" for m in n.blocks[1].nodes))
        assert "aten::batch_norm" not in [n.kind for n in branch.blocks[0].nodes]
    check(model, [images(2, 5, 6)], [images(3, 7, 6)])


def test_linear_flattened_to_its_features_is_folded_from_export():
    # an exported program makes its constants where first used (after the product): the
    # fold moves them up
    model = LinearFlattenBN("flatten").eval()
    x = images(2, 5, 6)
    program = torch.export.export(model, (x,), dynamic_shapes=({0: torch.export.Dim.AUTO,
                                                                 1: torch.export.Dim.AUTO},))
    mod = sr.StaticModule(program)
    norms = ("aten::batch_norm", "aten::_native_batch_norm_legit_no_training")
    top = [n.kind for n in mod.graph.nodes]
    assert not any(k in norms for k in top)  # (left only in the as-was branch of a rank check)
    assert "prim::If" in top
    for shape in ((2, 5, 6), (3, 7, 6)):
        x = images(*shape)
        for _ in range(2):
            torch.testing.assert_close(mod(x), model(x))
