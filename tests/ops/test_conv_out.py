"""Measured convolutions write into the arena where our kernel is chosen: the value is a
planned arena tensor (no allocation a call: ~1 µs of a small convolution's ~2); where
another kernel is chosen, the out variant declines (``WriteDeclined``) and the value is
allocated for that memory layout — once, not on every call."""

from __future__ import annotations

import pytest
import torch
from differential import check
from test_kernels import MEASURE, MEASURE_INTERP, Convs

import static_runtime as sr
from static_runtime.ops import ckernels, conv
from static_runtime.ops.kernels import Choice, KernelChooser
from static_runtime.ops.registry import Tier, WriteDeclined

pytestmark = pytest.mark.skipif(not ckernels.available(),
                                reason=f"no C kernels: {ckernels.why_unavailable()}")

CONV = "static_runtime::conv2d_pointwise"


def _force(monkeypatch, pick):
    """Every measured convolution takes ``pick(key, names)``; other nodes their default."""
    def forced(self, key, names, make, default):
        name = pick(key, names) if key.startswith("conv2d") else default
        return Choice(name if name in names else default, {}, "forced")

    monkeypatch.setattr(KernelChooser, "choose", forced)


@pytest.fixture
def declines(monkeypatch):
    """How many times a convolution's out variant declined."""
    count = [0]

    class Counted(WriteDeclined):
        def __init__(self, *args):
            count[0] += 1
            super().__init__(*args)

    monkeypatch.setattr(conv, "WriteDeclined", Counted)
    return count


def _names_in_arena(mod: sr.StaticModule) -> set[str]:
    return {p.request.name for p in mod.memory_plan().placements}


def _conv_outputs(mod: sr.StaticModule) -> set[str]:
    return {pn.node.outputs[0].name for pn in mod.plan.nodes() if pn.kind == CONV}


def test_ours_chosen_every_convolution_writes_into_the_arena(monkeypatch, declines):
    _force(monkeypatch, lambda key, names: "native")
    torch.manual_seed(0)
    first, second = [torch.randn(1, 3, 12, 12)], [torch.randn(2, 3, 9, 7)]
    check(Convs().eval(), first, second, options={"measure": MEASURE,
                                                    "interpreter": MEASURE_INTERP})
    model = Convs().eval()
    mod = sr.StaticModule(torch.jit.script(model), MEASURE)
    assert all(pn.tier is Tier.OUT for pn in mod.plan.nodes() if pn.kind == CONV)
    for x in (first[0], second[0], first[0]):
        before = x.clone()
        for _ in range(3):
            torch.testing.assert_close(mod(x), model(x), rtol=1e-4, atol=1e-4)
        assert torch.equal(x, before)
    # every convolution's result but the one the caller gets lives in the arena
    inner = _conv_outputs(mod) & {v.name for pn in mod.plan.nodes() for v in pn.node.inputs}
    assert len(inner) == 4 and inner <= _names_in_arena(mod), (inner, _names_in_arena(mod))
    assert declines[0] == 0


@pytest.mark.parametrize("other", ["onednn", "aten"])
def test_a_convolution_on_another_kernel_is_allocated_after_one_decline(monkeypatch,
                                                                        declines, other):
    # the 1 × 1 ones (w=(24, 16 / (16, 24) on ours, the 3 × 3 and the depthwise on ``other``
    _force(monkeypatch, lambda key, names: "native" if "1, 1)" in key else other)
    model = Convs().eval()
    mod = sr.StaticModule(torch.jit.script(model), MEASURE)
    torch.manual_seed(1)
    for shape in ((1, 3, 12, 12), (2, 3, 9, 7)):
        x = torch.randn(shape)
        for _ in range(2):
            torch.testing.assert_close(mod(x), model(x), rtol=1e-4, atol=1e-4)
        after_layout = declines[0]
        for _ in range(3):
            torch.testing.assert_close(mod(x), model(x), rtol=1e-4, atol=1e-4)
        assert declines[0] == after_layout  # declined on a layout's first run only
    # each declining convolution declines when a recording checks it and on the first run
    # of the first layout; the layouts after allocate it without asking
    assert 1 <= declines[0] <= 2 * 2 + 2
    convs = [pn for pn in mod.plan.nodes() if pn.kind == CONV]
    others = {pn.outputs[0] for pn in convs
              if tuple(mod.plan.constants[pn.inputs[1]].shape[-2:]) != (1, 1)}
    assert len(others) == 2 and mod._memory.declined == others
    assert "into the arena where ours is chosen" in mod.describe()


def test_one_pixel_convolutions_of_an_excitation_block_write_the_arena(monkeypatch, declines):
    """A squeeze-and-excitation block's 1 × 1 convolutions on a 1 × 1-pixel tensor: the plan
    lays their results out row-major (the same bytes as channels-last at one pixel), and
    ours writes them there rather than declining."""
    from test_kernels import Excite

    _force(monkeypatch, lambda key, names: "native")
    model = Excite().eval()
    mod = sr.StaticModule(torch.jit.script(model), MEASURE)
    for shape in ((1, 8, 6, 6), (3, 8, 5, 7)):
        x = torch.randn(shape)
        for _ in range(3):
            torch.testing.assert_close(mod(x), model(x), rtol=1e-4, atol=1e-4)
    assert declines[0] == 0 and not mod._memory.declined
    assert _conv_outputs(mod) <= _names_in_arena(mod)
