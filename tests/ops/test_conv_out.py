"""Measured convolutions write into the arena where our kernel is chosen: the value is a
planned arena tensor (no allocation a call: ~1 µs of a small convolution's ~2); where
another kernel is chosen, the out variant hands back that kernel's result
(``registry.hands_back``) — no refusal, no new binding, no code made for it."""

from __future__ import annotations

import pytest
import torch
from differential import check
from test_kernels import MEASURE, MEASURE_INTERP, Convs, Excite

import static_runtime as sr
from static_runtime.ops import ckernels
from static_runtime.ops.conv import PER_SHAPE, ConvKernels
from static_runtime.ops.kernels import FOR_GOOD, Choice, KernelChooser
from static_runtime.ops.registry import Tier, may_hand_back

pytestmark = pytest.mark.skipif(not ckernels.available(),
                                reason=f"no C kernels: {ckernels.why_unavailable()}")

#: the measured convolutions: alone, and with a residual added (``fuse_conv_residual``)
CONVS = ("static_runtime::conv2d_pointwise", "static_runtime::conv2d_residual")


def _force(monkeypatch, pick):
    """Every measured convolution takes ``pick(key, names)``; other nodes their default."""
    def forced(self, key, names, make, default):
        name = pick(key, names) if key.startswith("conv2d") else default
        return Choice(name if name in names else default, {}, "forced")

    monkeypatch.setattr(KernelChooser, "choose", forced)


def _convs(mod: sr.StaticModule) -> list:
    return [pn for pn in mod.plan.nodes() if pn.kind in CONVS]


def _names_in_arena(mod: sr.StaticModule) -> set[str]:
    return {p.request.name for p in mod.memory_plan().placements}


def _inner_conv_outputs(mod: sr.StaticModule) -> set[str]:
    """Convolution results another node reads (the caller never gets them)."""
    read = {v.name for pn in mod.plan.nodes() for v in pn.node.inputs}
    return {pn.node.outputs[0].name for pn in _convs(mod)} & read


def _run(mod, model, shapes, calls=3):
    torch.manual_seed(1)
    for shape in shapes:
        x = torch.randn(shape)
        before = x.clone()
        for _ in range(calls):
            torch.testing.assert_close(mod(x), model(x), rtol=1e-4, atol=1e-4)
        assert torch.equal(x, before)


@pytest.mark.parametrize("pick", ["native", "mixed", "onednn", "aten", "native_cl"])
def test_convolutions_answer_as_torchscript_whichever_kernel_serves(monkeypatch, pick):
    # "mixed": the 1 × 1 ones (keys with a (..., 1, 1) weight) on ours, the 3 × 3 and the
    # depthwise on oneDNN; "native_cl": the first convolution (of the channels-first input)
    # copies it channels-last for ours, the others (which have no such candidate) on oneDNN
    _force(monkeypatch, lambda key, names: pick if pick != "mixed" else (
        "native" if "1, 1)" in key else "onednn"))
    torch.manual_seed(0)
    first, second = [torch.randn(1, 3, 12, 12)], [torch.randn(2, 3, 9, 7)]
    check(Convs().eval(), first, second, options={"measure": MEASURE,
                                                    "interpreter": MEASURE_INTERP})
    model = Convs().eval()
    mod = sr.StaticModule(torch.jit.script(model), MEASURE)
    assert all(pn.tier is Tier.OUT and may_hand_back(pn.out_fn) for pn in _convs(mod))
    _run(mod, model, ((1, 3, 12, 12), (2, 3, 9, 7), (1, 3, 12, 12)))
    assert (": native_cl (forced)" in mod.describe()) == (pick == "native_cl")
    # every result another node reads is planned in the arena, whichever kernel serves it
    inner = _inner_conv_outputs(mod)
    assert len(inner) == 4 and inner <= _names_in_arena(mod), (inner, _names_in_arena(mod))


def test_a_kernel_that_makes_its_own_result_makes_no_code_on_later_sizes(monkeypatch):
    """Sizes laid out after the first: where oneDNN serves, its result is handed back in the
    code the layouts run, not refused into code of their own."""
    _force(monkeypatch, lambda key, names: "native" if "1, 1)" in key else "onednn")
    model = Convs().eval()
    mod = sr.StaticModule(torch.jit.script(model), sr.StaticModuleOptions())
    _run(mod, model, ((1, 3, 12, 12), (1, 3, 16, 16)))
    from static_runtime.runtime.hot import wait_for_builds

    wait_for_builds()
    _run(mod, model, ((1, 3, 12, 12), (1, 3, 16, 16)))
    generated = mod._codes.generated
    _run(mod, model, ((1, 3, 10, 11), (2, 3, 13, 9), (1, 3, 12, 12), (1, 3, 14, 14)))
    assert mod._codes.generated == generated


def test_one_pixel_convolutions_of_an_excitation_block_write_the_arena(monkeypatch):
    """A squeeze-and-excitation block's 1 × 1 convolutions on a 1 × 1-pixel tensor: the plan
    lays their results out row-major (the same bytes as channels-last at one pixel), and
    ours writes them there."""
    _force(monkeypatch, lambda key, names: "native")
    model = Excite().eval()
    mod = sr.StaticModule(torch.jit.script(model), MEASURE)
    seen: list = []
    for pn in _convs(mod):
        out_fn = pn.out_fn

        def spy(out, *args, out_fn=out_fn):
            result = out_fn(out, *args)
            seen.append(result is out)
            return result

        object.__setattr__(pn, "out_fn", spy)
    _run(mod, model, ((1, 8, 6, 6), (3, 8, 5, 7)))
    assert seen and all(seen)  # (every call wrote its arena tensor)
    assert _inner_conv_outputs(mod) <= _names_in_arena(mod)


@pytest.mark.parametrize("allocating", [False, True])
def test_a_new_shape_of_a_bucket_runs_the_interim_kernel_then_the_choice(allocating,
                                                                          monkeypatch):
    """oneDNN compiles a primitive for each input shape: where it is chosen, a new shape of
    its bucket is served first by the fastest kernel that compiles nothing (ours), until
    oneDNN would have repaid its setup — never by ATen's, whose convolution is oneDNN's too,
    however cheap its first call was where it was measured."""
    monkeypatch.setattr(KernelChooser, "choose", lambda self, key, names, make, default: Choice(
        "onednn", {"native": 8.0, "onednn": 5.0, "aten": 5.5}, "measured",
        {"native": 0.0, "onednn": 9.0, "aten": 0.0}))
    ran: list[tuple[str, tuple]] = []

    def spied(name, made):
        if made is None:
            return None

        def call(x, *rest):
            ran.append((name, tuple(x.shape)))
            return made(x, *rest)
        for attr in ("out_shape",):
            if hasattr(made, attr):
                setattr(call, attr, getattr(made, attr))
        if hasattr(made, "into"):
            call.into = lambda x, out, into=made.into: (ran.append((name, tuple(x.shape))),
                                                        into(x, out))[1]
        return call

    for method in ("kernel", "direct"):
        original = getattr(ConvKernels, method)
        monkeypatch.setattr(ConvKernels, method, lambda self, name, *a, _original=original:
                            spied(name, _original(self, name, *a)))
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.ReLU()).eval()
    options = sr.StaticModuleOptions(shape_programs=False) if not allocating else \
        sr.StaticModuleOptions(enable_out_variant=False, optimize_memory=False)
    mod = sr.StaticModule(torch.jit.script(model), options)
    assert next(pn.kind for pn in mod.plan.nodes()) == CONVS[0]  # (then the layout back)
    # (1, 3, 12, 12) measured there; (1, 3, 13, 12) a new shape of its bucket (pixels ≤ 256)
    _run(mod, model, ((1, 3, 12, 12), (1, 3, 13, 12)), calls=7)
    new = [name for name, shape in ran if shape == (1, 3, 13, 12)]
    # 9 µs of setup, 3 µs saved a call: three calls of ours, then oneDNN's
    assert new == ["native"] * 3 + ["onednn"] * 4, ran
    assert {name for name, shape in ran if shape == (1, 3, 12, 12)} == {"onednn"}, ran
    assert "a new size: native for its first 3 calls" in mod.describe()


def test_an_interim_as_fast_as_the_choice_serves_new_shapes_for_good():
    """oneDNN kept by the default's stickiness (``pick``: another must beat it by 5 %) while
    ours is as fast and compiles nothing: ours serves every new shape."""
    choice = Choice("onednn", {"native": 828.0, "onednn": 837.0, "aten": 884.0}, "measured",
                    {"native": 190.0, "onednn": 1100.0, "aten": 150.0})
    assert choice.interim(PER_SHAPE) == ("native", FOR_GOOD)
    assert "a new size: native for every call" in choice.describe(PER_SHAPE)
    # ours' first call dearer than oneDNN's though compiling nothing: no interim... unless
    # oneDNN's setup makes its own first call dearer still
    assert Choice("onednn", {"native": 30.0, "onednn": 5.0}, "measured",
                  {"native": 0.0, "onednn": 20.0}).interim(PER_SHAPE) is None
