"""``fuse_gated_linear`` (``passes/gated.py``) and the node it makes (``ops/gated.py``): a SwiGLU
MLP's ``silu(linear(x, W_gate)) * linear(x, W_up)`` becomes one node whose kernel is measured;
with either kernel forced it equals TorchScript on two shape sets — biases or none, either
order of the product, K past the kernel's K block, H not a multiple of 16, an expert behind
an ``if`` —; near misses are left alone, and without measured kernels nothing is fused."""

import pytest
import torch
import torch.nn.functional as F
from differential import check, script
from measured import (  # noqa: F401
    MEASURE,
    OPTIONS,
    force_kernel,
    fresh_kernel_cache,
    needs_ckernels,
)
from passes_helpers import kinds
from torch import Tensor, nn

import static_runtime as sr
from static_runtime.ops.ckernels.layers import GatedGemm
from static_runtime.ops.registry import Tier, may_hand_back

pytestmark = needs_ckernels


class SwiGLU(nn.Module):
    def __init__(self, k: int, h: int, bias: bool = False, up_first: bool = False):
        super().__init__()
        torch.manual_seed(k + h)
        self.gate = nn.Linear(k, h, bias=bias)
        self.up = nn.Linear(k, h, bias=bias)
        self.down = nn.Linear(h, k, bias=False)
        self.up_first = up_first

    def forward(self, x: Tensor) -> Tensor:
        if self.up_first:
            return self.down(self.up(x) * F.silu(self.gate(x)))
        return self.down(F.silu(self.gate(x)) * self.up(x))


class Expert(nn.Module):
    """A mixture of experts' expert: the MLP runs only when rows are routed to it."""

    def __init__(self):
        super().__init__()
        self.mlp = SwiGLU(24, 40, bias=True)

    def forward(self, x: Tensor, rows: Tensor) -> Tensor:
        out = torch.zeros_like(x)
        if rows.numel() > 0:
            out = out.index_add(0, rows, self.mlp(x[rows]))
        return out


def _gated(mod: sr.StaticModule) -> int:
    return kinds(mod.graph).count("static_runtime::gated_linear")


CASES = [  # (K, H, bias, up first, first input, second input)
    (32, 48, False, False, (4, 32), (2, 9, 32)),
    (64, 100, True, True, (1, 64), (33, 64)),  # H not a multiple of 16; 33 rows
    (300, 40, True, False, (5, 300), (3, 2, 300)),  # K past the kernel's K block (256)
]


@pytest.mark.parametrize("kernel", ["native", "aten"])
@pytest.mark.parametrize("case", CASES, ids=lambda c: f"k{c[0]}_h{c[1]}_bias{c[2]}_up{c[3]}")
def test_a_swiglu_mlp_fuses_and_answers_as_torchscript(case, kernel, monkeypatch):
    force_kernel(monkeypatch, kernel)
    k, h, bias, up_first, first, second = case
    model = SwiGLU(k, h, bias, up_first).eval()
    mods = check(model, (torch.randn(*first),), (torch.randn(*second),),
                 options={**OPTIONS, "default_kernels": sr.StaticModuleOptions(
                     kernel_choice="default")}, rtol=1e-4, atol=1e-4)
    assert _gated(mods["measure"]) == 1 and _gated(mods["interpreter"]) == 1
    assert _gated(mods["default_kernels"]) == 0  # (only where the kernel can be measured)
    assert f": {kernel} (forced)" in mods["measure"].describe()
    # an out variant: where ours serves it writes its arena tensor, where ATen's does it
    # hands back ATen's result (both checked above, on two shape sets)
    gated = next(pn for pn in mods["measure"].plan.nodes()
                 if pn.kind == "static_runtime::gated_linear")
    assert gated.tier is Tier.OUT and may_hand_back(gated.out_fn)


def test_an_expert_behind_an_if_fuses():
    mods = check(Expert().eval(), (torch.randn(6, 24), torch.tensor([0, 4, 5])),
                 (torch.randn(3, 24), torch.tensor([], dtype=torch.long)),
                 options=OPTIONS, rtol=1e-4, atol=1e-4)
    assert _gated(mods["measure"]) == 1


def test_the_choice_is_measured_and_shown():
    mod = sr.StaticModule(script(SwiGLU(64, 96).eval()), MEASURE)
    mod(torch.randn(8, 64))
    text = mod.describe()
    assert "gated_linear: kernel chosen per row count by measurement" in text
    assert "µs: " in text and "native" in text and "aten" in text


def test_near_misses_are_left_alone():
    def shared_silu(x: Tensor, wg: Tensor, wu: Tensor) -> tuple[Tensor, Tensor]:
        a = F.silu(F.linear(x, wg))
        return a * F.linear(x, wu), a  # the activation is used again

    def other_inputs(x: Tensor, y: Tensor, wg: Tensor, wu: Tensor) -> Tensor:
        return F.silu(F.linear(x, wg)) * F.linear(y, wu)  # two inputs

    def weights_given(x: Tensor, wg: Tensor, wu: Tensor) -> Tensor:
        return F.silu(F.linear(x, wg)) * F.linear(x, wu)  # weights are inputs, not constants

    wg, wu = torch.randn(16, 8), torch.randn(16, 8)
    for fn, args in ((shared_silu, (torch.randn(3, 8), wg, wu)),
                     (other_inputs, (torch.randn(3, 8), torch.randn(3, 8), wg, wu)),
                     (weights_given, (torch.randn(3, 8), wg, wu))):
        mods = check(fn, args, args, options=OPTIONS)
        assert _gated(mods["measure"]) == 0, fn.__name__


def test_the_kernel_alone_matches_the_composite():
    for m, k, h, bias in ((1, 128, 352, False), (9, 16, 17, True), (20, 513, 33, True)):
        torch.manual_seed(m + k)
        wg, wu = torch.randn(h, k) / k ** 0.5, torch.randn(h, k) / k ** 0.5
        bg, bu = (torch.randn(h), None) if bias else (None, None)
        x, out = torch.randn(m, k), torch.full((m, h), float("nan"))
        before = x.clone()
        GatedGemm(wg, bg, wu, bu).direct(m)(x, out)
        torch.testing.assert_close(out, F.silu(F.linear(x, wg, bg)) * F.linear(x, wu, bu),
                                   rtol=1e-4, atol=1e-4)
        assert torch.equal(x, before)
    with pytest.raises(ValueError, match="two float32"):
        GatedGemm(torch.randn(4, 3), None, torch.randn(5, 3), None)
