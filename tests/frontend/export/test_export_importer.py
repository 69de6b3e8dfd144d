"""The exported program → IR: every built-in model checked against eager PyTorch, with and
without decompositions; programs that write their buffers or inputs refused."""

import pytest
import torch
from export_helpers import exported
from frontend.eager_check import check_eager

import static_runtime as sr
from static_runtime.frontend.export import ExportSignature, import_export
from static_runtime.models import MODELS
from static_runtime.models.export import export_case


@pytest.mark.parametrize("name", list(MODELS))
def test_model_exported_matches_eager(name):
    """Every built-in model (the rewrite where export refuses the original) exported with a
    symbolic batch: two batch sizes and the first again, against the original eager model."""
    ep = exported(name)
    eager = MODELS[name].build()
    sets = [export_case(name, batch=b, seed=b)[1] for b in (3, 5)]
    mods = check_eager(lambda opts: sr.StaticModule(ep, options=opts, example_inputs=sets[0]),
                       eager, sets, rtol=1e-4, atol=1e-5)
    assert isinstance(mods["default"].graph.signature, ExportSignature)


@pytest.mark.parametrize("name", ["mlp", "resnet_small", "multi_head_attention"])
def test_decomposed_program_matches_eager(name):
    """After ``run_decompositions()`` (core ATen: addmm, convolution,
    _native_batch_norm_legit_no_training...) the program runs too."""
    graph = import_export(exported(name), decompose=True)
    eager = MODELS[name].build()
    sets = [export_case(name, batch=b, seed=b)[1] for b in (2, 4)]
    check_eager(lambda opts: sr.StaticModule(graph, options=opts), eager, sets,
                rtol=1e-4, atol=1e-5)


def test_conv_batch_norm_folded():
    mod = sr.StaticModule(exported("resnet_small"))
    kinds = {n.kind for n in mod.graph.walk()}
    assert not kinds & {"aten::batch_norm", "aten::_native_batch_norm_legit_no_training"}
    assert kinds & {"aten::conv2d", "static_runtime::conv2d_pointwise"}


class WritesBuffer(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("count", torch.zeros(3))

    def forward(self, x):
        self.count[:2].add_(1)
        return x + self.count


class WritesInput(torch.nn.Module):
    def forward(self, x):
        x.mul_(2)
        return x + 1


def test_writes_to_buffers_and_inputs_are_refused():
    with pytest.raises(sr.FrontendError, match="writes buffer 'count' in place"):
        sr.StaticModule(WritesBuffer(), example_inputs=(torch.randn(3),))
    with pytest.raises(sr.FrontendError, match="writes input 'x' in place"):
        sr.StaticModule(WritesInput(), example_inputs=(torch.randn(3),))


def test_functionalized_buffer_mutation_is_refused():
    bn = torch.nn.BatchNorm1d(4).train()
    ep = torch.export.export(bn, (torch.randn(8, 4),)).run_decompositions()
    with pytest.raises(sr.FrontendError, match="writes buffer 'running_mean'.*eval mode"):
        sr.StaticModule(ep)
