"""``passes/masks.py`` (through ``constant_propagation``): an exported attention mask made
from an all-True or all-zero constant is dropped, and results still equal eager PyTorch; masks
that mask something stay."""

import sys
from pathlib import Path

import pytest
import torch
from differential import OPTION_SETS
from torch import nn
from torch.export import Dim

sys.path.insert(0, str(Path(__file__).parents[1] / "frontend"))
from eager_check import check_eager

import static_runtime as sr

SDPA = "aten::scaled_dot_product_attention"


class _Attention(nn.Module):
    """Self-attention with a mask sliced and expanded from a buffer, as Hugging Face's mask
    helpers make one under ``torch.export``."""

    def __init__(self, mask: torch.Tensor, heads: int = 2, dim: int = 16):
        super().__init__()
        torch.manual_seed(0)
        self.qkv = nn.Linear(dim, 3 * dim)
        self.heads = heads
        self.register_buffer("mask", mask)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = self.qkv(x).view(b, t, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        mask = self.mask[:t, :t][None, None].expand(b, 1, t, t)
        out = nn.functional.scaled_dot_product_attention(q, k, v, mask)
        return out.transpose(1, 2).reshape(b, t, d)


def _mask_inputs(mod: sr.StaticModule) -> list[str]:
    return [n.inputs[3].node.kind for n in mod.graph.walk() if n.kind == SDPA]


def _export(model: nn.Module) -> torch.export.ExportedProgram:
    return torch.export.export(model, (torch.randn(2, 8, 16),),
                               dynamic_shapes=({0: Dim("batch", min=1, max=64)},))


_SETS = [(torch.randn(3, 8, 16),), (torch.randn(1, 8, 16),)]


@pytest.mark.parametrize("mask", [torch.ones(8, 8, dtype=torch.bool), torch.zeros(8, 8)],
                         ids=["all-true", "all-zero"])
def test_a_mask_that_masks_nothing_is_dropped(mask):
    model = _Attention(mask).eval()
    ep = _export(model)
    mods = check_eager(lambda opts: sr.StaticModule(ep, options=opts), model, _SETS)
    for name, mod in mods.items():
        if not OPTION_SETS[name].constant_propagation:
            assert _mask_inputs(mod) == ["aten::expand"]  # the pass is off: kept
            continue
        assert _mask_inputs(mod) == ["prim::Constant"]
        sdpa = next(n for n in mod.graph.walk() if n.kind == SDPA)
        assert sdpa.inputs[3].node.attrs.get("value") is None


@pytest.mark.parametrize("mask", [torch.ones(8, 8, dtype=torch.bool).tril(),
                                  torch.zeros(8, 8).masked_fill(torch.eye(8, dtype=torch.bool),
                                                                -1.0)],
                         ids=["causal", "additive"])
def test_a_mask_that_masks_something_stays(mask):
    model = _Attention(mask).eval()
    ep = _export(model)
    mods = check_eager(lambda opts: sr.StaticModule(ep, options=opts), model, _SETS)
    for mod in mods.values():
        (kind,) = _mask_inputs(mod)
        assert kind != "prim::Constant" or isinstance(
            next(n for n in mod.graph.walk() if n.kind == SDPA).inputs[3].node.attrs.get("value"),
            torch.Tensor)
