"""Getting the program: an ``nn.Module`` exported for the user in eval mode, ``.pt2``
archives, and the errors for what is not one."""

import pytest
import torch
from export_helpers import exported
from frontend.eager_check import check_eager

import static_runtime as sr
from static_runtime.models import MODELS
from static_runtime.models.export import export_case


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
    torch.export.save(exported("mlp"), path)
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
