"""The built-in example models (``static_runtime.models``) against the TorchScript interpreter
and against eager PyTorch.

Every model is scripted and run through the differential ``check`` with two batch sizes
(the second input set differs in shape); each is also run beside the eager ``nn.Module`` it
was scripted from, call for call (frozen TorchScript has numerics folds that are wrong on
some graphs, so the interpreter alone is not oracle enough); and saved with ``torch.jit.save`` and loaded back
through ``StaticModule(path)``. ``nn.TransformerEncoderLayer`` gets its own cases: PyTorch's
C++ Static Runtime refuses it, ours must run it, with and without a padding mask, against
both interpreter paths (the slow one with autograd on, the fused fast path without).
"""

from __future__ import annotations

import warnings

import pytest
import torch
from differential import assert_same, check, script

import static_runtime as sr
from static_runtime.models import MODELS, ModelSpec

NAMES = sorted(MODELS)


def _scripted(spec: ModelSpec) -> torch.jit.ScriptModule:
    return script(spec.build())


# --------------------------------------------------------------------------- the registry


@pytest.mark.parametrize("name", NAMES)
def test_spec_is_deterministic_and_eager_runs(name):
    spec = MODELS[name]
    assert spec.name == name and spec.description
    state = torch.random.get_rng_state()
    a, b = spec.build(), spec.build()
    assert torch.equal(torch.random.get_rng_state(), state), "build() changed the global RNG"
    assert not a.training, "build() returns a model in eval mode"
    for (ka, va), (kb, vb) in zip(a.state_dict().items(), b.state_dict().items(), strict=True):
        assert ka == kb and torch.equal(va, vb), f"{ka} differs between two builds"
    assert not all(torch.equal(va, vb) for va, vb in
                   zip(a.state_dict().values(), spec.build(seed=1).state_dict().values())), \
        "the seed does not change the weights"
    xs = spec.example_inputs(3)
    assert isinstance(xs, tuple)
    assert_same(list(xs), list(spec.example_inputs(3)), "example inputs (same seed)")
    with torch.no_grad():
        assert_same(a(*xs), b(*xs), "eager output")


def test_example_inputs_refuse_bad_batch():
    with pytest.raises(ValueError, match="batch"):
        MODELS["mlp"].example_inputs(0)


# --------------------------------------------------------------------------- differential


@pytest.mark.parametrize("name", NAMES)
def test_model_matches_interpreter(name):
    spec = MODELS[name]
    check(_scripted(spec), spec.example_inputs(2), spec.example_inputs(5, seed=1))


@pytest.mark.parametrize("options", ["default", "fused"])
@pytest.mark.parametrize("name", NAMES)
def test_model_matches_eager(name, options):
    """Ours beside the eager model it was scripted from, the same calls in the same order
    (models with state — attributes the forward writes — evolve alike): two batch sizes,
    each called twice, then the first again."""
    from differential import OPTION_SETS

    spec = MODELS[name]
    eager = spec.build()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        mod = sr.StaticModule(_scripted(spec), options=OPTION_SETS[options])
    calls = [spec.example_inputs(2), spec.example_inputs(2), spec.example_inputs(5, seed=1),
             spec.example_inputs(5, seed=1), spec.example_inputs(2, seed=2)]
    for k, inputs in enumerate(calls):
        with torch.no_grad():
            expected = eager(*inputs)
        assert_same(mod(*inputs), expected, f"{name} call {k} vs eager", rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("name", NAMES)
def test_model_batch_one_and_back(name):
    """Batch 1 (the serving case) after a larger batch, then the larger batch again."""
    spec = MODELS[name]
    check(_scripted(spec), spec.example_inputs(4, seed=2), spec.example_inputs(1, seed=3))


def test_control_flow_takes_both_branches_and_loops():
    spec = MODELS["control_flow"]
    scripted = _scripted(spec)
    (x,) = spec.example_inputs(3)
    positive, negative = x.abs() + 0.1, -(x.abs() + 0.1)
    mods = check(scripted, [positive], [negative])
    check(scripted, [negative, 3], [positive, 0])
    check(scripted, [positive], kwargs={"steps": 5})
    kinds = {n.kind for n in mods["default"].graph.walk()}
    assert {"prim::If", "prim::Loop"} <= kinds, "the model should keep its control flow"


def test_attribute_setter_state():
    """The forward writes ``self.b`` and ``self.scaler.scale``; both are read back."""
    spec = MODELS["attribute_setter"]
    scripted = _scripted(spec)
    assert scripted.b == 10
    (x,) = spec.example_inputs(2)
    ours = sr.StaticModule(scripted)(x)
    expected = scripted(x)
    assert scripted.b == 20 and scripted.scaler.scale == pytest.approx(float(x.mean()) + 1.0)
    assert_same(ours, expected)


# --------------------------------------------------------------------------- transformer


def _padding_mask(batch: int, seq: int, lengths: list[int]) -> torch.Tensor:
    """True where a position is padding; every sample keeps at least one real position."""
    mask = torch.zeros(batch, seq, dtype=torch.bool)
    for b, n in enumerate(lengths):
        mask[b, n:] = True
    return mask


def _no_grad(fn):
    def run(*args, **kwargs):
        with torch.no_grad():
            return fn(*args, **kwargs)

    return run


TRANSFORMER_CASES = {
    "no_mask": lambda xs, ys: ([xs[0]], [ys[0]]),
    "padding_mask": lambda xs, ys: (
        [xs[0], _padding_mask(2, 16, [16, 5])],
        [ys[0][:, :9], _padding_mask(5, 9, [1, 9, 4, 7, 2])]),
}


@pytest.mark.parametrize("case", sorted(TRANSFORMER_CASES))
@pytest.mark.parametrize("autograd", ["grad_enabled", "no_grad"])
def test_transformer_encoder_layer(case, autograd):
    """Ours (run without autograd, so the fused path's conditions hold) against the
    interpreter's slow path (autograd on, parameters require grad) and its fused
    ``torch._transformer_encoder_layer_fwd`` path (eval mode, no grad)."""
    spec = MODELS["transformer_encoder"]
    scripted = _scripted(spec)
    first, second = TRANSFORMER_CASES[case](spec.example_inputs(2),
                                           spec.example_inputs(5, seed=1))
    reference = _no_grad(scripted) if autograd == "no_grad" else scripted
    check(scripted, first, second, reference=reference)


def _ran_ops(fn) -> set[str]:
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        fn()
    return {e.key for e in prof.key_averages()}


@pytest.mark.parametrize("masked", [False, True], ids=["no_mask", "padding_mask"])
def test_transformer_fast_path_is_exercised(masked):
    """The comparisons above are meaningful: the interpreter without grad and our runtime
    both take the fused kernel, the interpreter with grad does not."""
    spec = MODELS["transformer_encoder"]
    scripted = _scripted(spec)
    (x,) = spec.example_inputs(2)
    seq = x.shape[1]
    args = (x, _padding_mask(2, seq, [seq, 5])) if masked else (x,)
    mod = sr.StaticModule(scripted)
    fused = "aten::_transformer_encoder_layer_fwd"
    assert fused in _ran_ops(lambda: mod(*args))
    with torch.no_grad():
        assert fused in _ran_ops(lambda: scripted(*args))
    assert fused not in _ran_ops(lambda: scripted(*args))


def test_transformer_refused_by_pytorch_static_runtime_runs_here():
    """PyTorch's C++ Static Runtime refuses the layer (``aten::__is__`` on tensors)."""
    spec = MODELS["transformer_encoder"]
    scripted = _scripted(spec)
    with pytest.raises(RuntimeError, match="canEnableStaticRuntime"):
        torch._C._jit_to_static_module(torch.jit.freeze(scripted.eval())._c)
    kinds = {n.kind for n in sr.StaticModule(scripted).graph.walk()}
    assert kinds & {"aten::__is__", "aten::__isnot__"}, \
        "the prepared graph no longer has identity checks; this test needs a new model"


# --------------------------------------------------------------------------- archives


@pytest.mark.parametrize("name", NAMES)
def test_saved_archive_loads(name, tmp_path):
    spec = MODELS[name]
    scripted = _scripted(spec)
    path = tmp_path / f"{name}.pt"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        torch.jit.save(scripted, str(path))
    mod = sr.StaticModule(str(path))
    from_pathlike = sr.StaticModule(path)
    for xs in (spec.example_inputs(2), spec.example_inputs(5, seed=1)):
        expected = scripted(*xs)
        assert_same(mod(*xs), expected, f"{name} from str path")
        assert_same(from_pathlike(*xs), expected, f"{name} from Path")


# --------------------------------------------------------------------------- other options


OTHER_OPTIONS = {
    "no_out_variant": sr.StaticModuleOptions(enable_out_variant=False),
    "no_freeze": sr.StaticModuleOptions(freeze=False),
    "verify_passes": sr.StaticModuleOptions(verify_passes=True),
}


def _option_cases():
    for name in NAMES:
        for option in sorted(OTHER_OPTIONS):
            yield pytest.param(name, option, id=f"{name}-{option}")


@pytest.mark.parametrize("name,option", list(_option_cases()))
def test_model_under_other_options(name, option):
    spec = MODELS[name]
    check(_scripted(spec), spec.example_inputs(2), spec.example_inputs(3, seed=1),
          options={option: OTHER_OPTIONS[option]})


def _warns_on_negative(x: torch.Tensor) -> torch.Tensor:
    if bool(x.sum() < 0):
        warnings.warn("negative sum")
    return x + 1


def test_model_code_that_warns():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        check(_warns_on_negative, [torch.ones(2)], [-torch.ones(3)])
    mod = sr.StaticModule(script(_warns_on_negative))
    with pytest.warns(UserWarning, match="negative sum"):
        assert_same(mod(-torch.ones(2)), torch.zeros(2))
