"""Models whose control flow depends on the data, scripted: a branch on a tensor's value, a
loop whose trip count is computed from the input, an early-exit cascade."""

from __future__ import annotations

import torch
from torch import Tensor, nn

from .spec import SCRIPT, ZooModel

FAMILY = "control flow"


class GatedExperts(nn.Module):
    """Routes the whole batch to one of two expert MLPs by the sign of a gate's mean, and
    adds a correction only when the output's mean square exceeds a threshold."""

    def __init__(self, dim: int = 64):
        super().__init__()
        self.gate = nn.Linear(dim, 1)
        self.expert_a = nn.Sequential(nn.Linear(dim, 128), nn.ReLU(), nn.Linear(128, dim))
        self.expert_b = nn.Sequential(nn.Linear(dim, 128), nn.Tanh(), nn.Linear(128, dim))
        self.correction = nn.Linear(dim, dim)

    def forward(self, x: Tensor) -> Tensor:
        if self.gate(x).mean() > 0:
            y = self.expert_a(x)
        else:
            y = self.expert_b(x)
        if y.pow(2).mean() > 0.1:
            y = y - self.correction(y)
        return y


class IterativeRefiner(nn.Module):
    """A fixed-point refinement ``h = tanh(W h + U x)``: the number of steps is read from
    the input (its mean absolute value, 2 to 12 steps), and the loop also stops early once
    an update changes ``h`` by less than a tolerance."""

    def __init__(self, dim: int = 64, tolerance: float = 1e-3):
        super().__init__()
        self.w = nn.Linear(dim, dim, bias=False)
        self.u = nn.Linear(dim, dim)
        self.out = nn.Linear(dim, 16)
        self.tolerance = tolerance

    def forward(self, x: Tensor) -> tuple[Tensor, int]:
        steps = int(torch.clamp(x.abs().mean() * 8.0, 2.0, 12.0).item())
        ux = self.u(x)
        h = torch.zeros_like(ux)
        taken = 0
        for _ in range(steps):
            new = torch.tanh(self.w(h) + ux)
            delta = (new - h).abs().max()
            h = new
            taken += 1
            if bool(delta < self.tolerance):
                break
        return self.out(h), taken


class EarlyExitCascade(nn.Module):
    """Three stages, each followed by an exit classifier; stops after the first stage whose
    least confident sample exceeds the confidence threshold. The stages' weights are stacked
    so that the loop can index them (TorchScript unrolls loops over a ``ModuleList`` and then
    allows no ``break``)."""

    def __init__(self, dim: int = 64, classes: int = 10, stages: int = 3,
                 threshold: float = 0.2):
        super().__init__()
        self.stage_weight = nn.Parameter(torch.randn(stages, dim, dim) / dim ** 0.5)
        self.stage_bias = nn.Parameter(torch.randn(stages, dim) * 0.1)
        self.exit_weight = nn.Parameter(torch.randn(stages, classes, dim) / dim ** 0.5)
        self.exit_bias = nn.Parameter(torch.zeros(stages, classes))
        self.stages = stages
        self.threshold = threshold

    def forward(self, x: Tensor) -> tuple[Tensor, int]:
        h = x
        logits = torch.zeros(x.size(0), self.exit_bias.size(1))
        depth = 0
        for k in range(self.stages):
            h = nn.functional.gelu(nn.functional.linear(h, self.stage_weight[k],
                                                        self.stage_bias[k]))
            logits = nn.functional.linear(h, self.exit_weight[k], self.exit_bias[k])
            depth += 1
            confidence = torch.softmax(logits, dim=-1).amax(dim=-1)
            if bool(confidence.min() > self.threshold):
                break
        return logits, depth


def _vectors(batch: int, g: torch.Generator) -> tuple:
    # the scale differs per seed, so that seeds take different branches and trip counts
    scale = 0.5 + 1.5 * torch.rand((), generator=g).item()
    return (torch.randn(batch, 64, generator=g) * scale,)


MODELS = [
    ZooModel("gated_experts", FAMILY, "if on a gate's mean picks one of two expert MLPs; a "
             "second if on the output's mean square", (1, 16), GatedExperts, _vectors, SCRIPT),
    ZooModel("iterative_refiner", FAMILY, "fixed-point loop: trip count from .item() of the "
             "input, break when converged", (1, 16), IterativeRefiner, _vectors, SCRIPT),
    ZooModel("early_exit_cascade", FAMILY, "3 stages with exit classifiers; break at the "
             "first confident stage", (1, 16), EarlyExitCascade, _vectors, SCRIPT),
]
