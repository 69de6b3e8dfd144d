"""``fuse_gelu`` (``passes/gelu.py``): GELU's tanh approximation written out becomes
``aten::gelu(approximate="tanh")``; near misses are left alone; answers equal TorchScript's."""

import math

import torch
from differential import check
from torch import nn

import static_runtime as sr


class NewGelu(nn.Module):
    """GPT-2's gelu_new as Hugging Face writes it, once with a literal √(2/π) and operands
    swapped, after a linear."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(12, 20)

    def forward(self, x):
        h = self.fc(x)
        a = 0.5 * h * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi)
                                        * (h + 0.044715 * torch.pow(h, 3.0))))
        b = (1.0 + torch.tanh(0.7978845608 * (0.044715 * torch.pow(a, 3.0) + a))) * (a * 0.5)
        return b


class NearMisses(nn.Module):
    """Another κ, a square, and a tanh argument used twice: none is GELU."""

    def forward(self, x):
        a = 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.05 * torch.pow(x, 3.0))))
        b = 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi)
                                        * (x + 0.044715 * torch.pow(x, 2.0))))
        s = math.sqrt(2.0 / math.pi) * (x + 0.044715 * torch.pow(x, 3.0))
        c = 0.5 * x * (1.0 + torch.tanh(s))
        return a + b + c + s


def _kinds(mod):
    """Node kinds; a linear fused with its activation (``fuse_linear_activation``, under the
    default measured kernels) counts as the linear and that activation."""
    kinds = []
    for n in mod.graph.walk():
        if n.kind == "static_runtime::linear_pointwise":
            attr = n.inputs[3].node.attrs["value"]
            kinds += ["aten::linear", *([] if attr == "none" else [
                "aten::gelu" if attr.startswith("gelu") else f"aten::{attr}"])]
        else:
            kinds.append(n.kind)
    return kinds


def _inputs():
    torch.manual_seed(4)
    return [torch.randn(3, 12) * 3], [torch.randn(2, 5, 12) * 3]


def test_gelu_new_becomes_one_gelu_and_answers_equal():
    first, second = _inputs()
    model = NewGelu().eval()
    for how, module in (("script", model), ("trace", torch.jit.trace(model, first))):
        kinds = _kinds(check(module, first, second)["default"])  # (and every option set)
        assert kinds.count("aten::gelu") == 2 and "aten::tanh" not in kinds, how


def test_near_misses_are_left_alone():
    torch.manual_seed(5)
    kinds = _kinds(check(NearMisses().eval(), [torch.randn(4, 6)], [torch.randn(2, 3, 6)])
                   ["default"])
    assert "aten::gelu" not in kinds and kinds.count("aten::tanh") == 3


def test_switched_off():
    mod = sr.StaticModule(torch.jit.script(NewGelu().eval()),
                          sr.StaticModuleOptions(fuse_gelu=False))
    assert "aten::gelu" not in _kinds(mod)
