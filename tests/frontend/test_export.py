"""The torch.export importer: every built-in model and each kind of FX node it maps, checked
against eager PyTorch; pytree arguments and results; input guards; errors."""

import operator

import pytest
import torch
from eager_check import check_eager
from torch.export import Dim

import static_runtime as sr
from static_runtime.frontend.export import ExportSignature, import_export
from static_runtime.ir.verifier import verify
from static_runtime.models import MODELS
from static_runtime.models.export import export_case

# --------------------------------------------------------------------------- the models


def _export(name: str):
    model, example, dynamic = export_case(name, batch=2)
    return torch.export.export(model, example, dynamic_shapes=dynamic)


@pytest.mark.parametrize("name", list(MODELS))
def test_model_exported_matches_eager(name):
    """Every built-in model (the rewrite where export refuses the original) exported with a
    symbolic batch: two batch sizes and the first again, against the original eager model."""
    ep = _export(name)
    eager = MODELS[name].build()
    sets = [export_case(name, batch=b, seed=b)[1] for b in (3, 5)]
    mods = check_eager(lambda opts: sr.StaticModule(ep, options=opts, example_inputs=sets[0]),
                       eager, sets, rtol=1e-4, atol=1e-5)
    assert isinstance(mods["default"].graph.signature, ExportSignature)


@pytest.mark.parametrize("name", ["mlp", "resnet_small", "multi_head_attention"])
def test_decomposed_program_matches_eager(name):
    """After ``run_decompositions()`` (core ATen: addmm, convolution,
    _native_batch_norm_legit_no_training...) the program runs too."""
    graph = import_export(_export(name), decompose=True)
    eager = MODELS[name].build()
    sets = [export_case(name, batch=b, seed=b)[1] for b in (2, 4)]
    check_eager(lambda opts: sr.StaticModule(graph, options=opts), eager, sets,
                rtol=1e-4, atol=1e-5)


def test_conv_batch_norm_folded():
    mod = sr.StaticModule(_export("resnet_small"))
    kinds = {n.kind for n in mod.graph.walk()}
    assert not kinds & {"aten::batch_norm", "aten::_native_batch_norm_legit_no_training"}
    assert kinds & {"aten::conv2d", "static_runtime::conv2d_pointwise"}


def test_control_flow_maps_to_if_and_loop():
    mod = sr.StaticModule(_export("control_flow"))
    verify(mod.graph)
    kinds = [n.kind for n in mod.graph.walk()]
    assert "prim::If" in kinds and "prim::Loop" in kinds


# --------------------------------------------------------------------------- nn.Module input


def test_nn_module_exported_for_the_user_in_eval_mode_and_planned_ahead():
    model, example, dynamic = export_case("resnet_small", batch=2)
    model.train()
    model.blocks[0].eval()
    mod = sr.StaticModule(model, example_inputs=example, dynamic_shapes=dynamic)
    assert model.training and not model.blocks[0].training and model.blocks[1].training
    assert mod.ahead_of_time_error is None
    assert mod.memory_plan().arena_bytes > 0  # planned before any call
    model.eval()
    check_eager(lambda opts: sr.StaticModule(model, options=opts, example_inputs=example,
                                             dynamic_shapes=dynamic),
                MODELS["resnet_small"].build(), [example, export_case("resnet_small", 3)[1]],
                rtol=1e-4, atol=1e-5)


def test_nn_module_without_example_inputs_is_refused():
    with pytest.raises(sr.FrontendError, match="example_inputs"):
        sr.StaticModule(MODELS["mlp"].build())


def test_pt2_archive(tmp_path):
    path = tmp_path / "mlp.pt2"
    torch.export.save(_export("mlp"), path)
    sets = [export_case("mlp", batch=b)[1] for b in (2, 7)]
    check_eager(lambda opts: sr.StaticModule(path, options=opts), MODELS["mlp"].build(), sets)
    check_eager(lambda opts: sr.StaticModule(str(path), options=opts), MODELS["mlp"].build(),
                sets[:1])


def test_pt2_errors(tmp_path):
    missing = tmp_path / "missing.pt2"
    with pytest.raises(FileNotFoundError, match="missing.pt2"):
        sr.StaticModule(missing)
    bad = tmp_path / "bad.pt2"
    bad.write_bytes(b"not an archive")
    with pytest.raises(sr.FrontendError, match="bad.pt2.*not a torch.export archive"):
        sr.StaticModule(bad)


# --------------------------------------------------------------------------- node kinds


class Kinds(torch.nn.Module):
    """Multi-output ops (getitem), list-returning ops (ListUnpack), symbolic size arithmetic,
    dtype/keyword arguments, optional-tensor lists, a lifted constant and a buffer."""

    def __init__(self):
        super().__init__()
        self.register_buffer("shift", torch.linspace(-1, 1, 6), persistent=False)
        self.lin = torch.nn.Linear(6, 6)

    def forward(self, x, idx):
        values, indices = torch.max(x, dim=1)
        a, b = torch.split(x, [2, 4], dim=1)
        rows = x.shape[0] * 2
        y = torch.cat([b, a], 1).reshape(rows, 3).reshape(x.shape[0], -1)
        z = self.lin(y + self.shift).to(torch.float64).sum(dim=1, dtype=torch.float32)
        picked = x[idx]
        top = torch.topk(x, 2).values
        return values + z, indices, picked * torch.tensor([2.0]), top, rows // 2 + 1


def test_node_kinds_match_eager():
    model = Kinds().eval()
    batch = Dim("batch", min=2, max=64)
    mk = lambda n, k: (torch.randn(n, 6, generator=torch.Generator().manual_seed(n)),
                       torch.arange(k) % n)
    ep = torch.export.export(model, mk(4, 3), dynamic_shapes=({0: batch}, {0: Dim("k")}))
    targets = {n.target for n in ep.graph.nodes if n.op == "call_function"}
    assert operator.getitem in targets and operator.mul in targets
    check_eager(lambda opts: sr.StaticModule(ep, options=opts), model, [mk(4, 3), mk(9, 5)])


class Branchy(torch.nn.Module):
    def forward(self, x, y):
        # a predicate on a symbolic size (SymBool) and one on data (a bool tensor)
        small = torch.cond(x.shape[0] > 4, lambda x, y: x * 2, lambda x, y: x - y, (x, y))
        return torch.cond(small.sum() > 0, lambda t: t.sin(), lambda t: t.cos(), (small,))


def test_cond_with_symbolic_and_tensor_predicates():
    model = Branchy()
    mk = lambda n, s: (torch.randn(n, 3, generator=torch.Generator().manual_seed(s)),
                       torch.randn(n, 3, generator=torch.Generator().manual_seed(s + 1)))
    batch = Dim("batch", min=2, max=64)
    ep = torch.export.export(model, mk(3, 0), dynamic_shapes=({0: batch}, {0: batch}))
    sets = [mk(3, 0), mk(6, 1), mk(3, 7), mk(8, 9)]
    check_eager(lambda opts: sr.StaticModule(ep, options=opts), model, sets)


# --------------------------------------------------------------------------- pytree


class Nested(torch.nn.Module):
    def forward(self, pair, feats, *, scale):
        a, b = pair
        out = {"sum": a + b * scale, "parts": [feats["u"].relu(), feats["v"] - a]}
        return out, (a * b,)


def test_pytree_inputs_and_outputs_keep_the_users_structure():
    model = Nested()
    mk = lambda s: ((torch.randn(2, 3, generator=torch.Generator().manual_seed(s)),
                     torch.randn(2, 3, generator=torch.Generator().manual_seed(s + 1))),
                    {"u": torch.randn(2, 3), "v": torch.randn(2, 3)})
    ep = torch.export.export(model, mk(0), {"scale": torch.tensor(2.0)})
    check_eager(lambda opts: sr.StaticModule(ep, options=opts), model, [mk(0), mk(5)],
                [{"scale": torch.tensor(2.0)}, {"scale": torch.tensor(-1.0)}])
    mod = sr.StaticModule(ep)
    pair, feats = mk(1)
    # dict keys in another order are the same structure
    swapped = {"v": feats["v"], "u": feats["u"]}
    torch.testing.assert_close(mod(pair, swapped, scale=torch.tensor(2.0)),
                               model(pair, feats, scale=torch.tensor(2.0)))
    with pytest.raises(sr.ArgumentError, match="structured as"):
        mod(list(pair), feats, scale=torch.tensor(2.0))
    with pytest.raises(sr.ArgumentError, match="structured as"):
        mod(pair, feats)


# --------------------------------------------------------------------------- guards


def test_static_export_refuses_other_sizes_naming_the_argument():
    (x,) = MODELS["multi_head_attention"].example_inputs(2)
    ep = torch.export.export(MODELS["multi_head_attention"].build(), (x,))
    mod = sr.StaticModule(ep)
    seq = x.shape[1]
    with pytest.raises(sr.ArgumentError, match=rf"args\[0\].*shape \(2, {seq}, 256\).*got shape "
                                               rf"\(3, 16, 256\)"):
        mod(torch.randn(3, 16, 256))
    with pytest.raises(sr.ArgumentError, match="3 dimensions"):
        mod(torch.randn(2, 16))


def test_symbolic_sizes_checked_for_range_and_equality():
    model = lambda x, y: x + y
    batch = Dim("batch", min=2, max=8)

    class Add(torch.nn.Module):
        def forward(self, x, y):
            return model(x, y)

    ep = torch.export.export(Add(), (torch.randn(3, 4), torch.randn(3, 4)),
                             dynamic_shapes=({0: batch}, {0: batch}))
    mod = sr.StaticModule(ep)
    torch.testing.assert_close(mod(torch.ones(5, 4), torch.ones(5, 4)), torch.full((5, 4), 2.0))
    with pytest.raises(sr.ArgumentError, match=r"2 <= s\d+ <= 8, got shape \(9, 4\)"):
        mod(torch.ones(9, 4), torch.ones(9, 4))
    with pytest.raises(sr.ArgumentError, match=r"args\[1\].*s\d+ = 5 from args\[0\]"):
        mod(torch.ones(5, 4), torch.ones(6, 4))


def test_symbolic_int_input_and_specialised_int():
    ep = _export("control_flow")
    mod = sr.StaticModule(ep)
    x = torch.randn(3, 32)
    torch.testing.assert_close(mod(x, 3), MODELS["control_flow"].build()(x, 3),
                               rtol=1e-4, atol=1e-5)
    model, example, _ = export_case("control_flow")
    static = sr.StaticModule(torch.export.export(model, example))
    with pytest.raises(sr.ArgumentError, match="8 .specialised when exported.*got 3"):
        static(torch.randn(2, 32), 3)


# --------------------------------------------------------------------------- refusals


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


def test_unsupported_higher_order_op_is_named():
    from torch._higher_order_ops.scan import scan

    class Scan(torch.nn.Module):
        def forward(self, x):
            return scan(lambda c, y: (c + y, c * 2), torch.zeros(3), x)[0]

    with pytest.raises(sr.FrontendError, match="higher-order operator scan"):
        sr.StaticModule(Scan(), example_inputs=(torch.randn(4, 3),))
