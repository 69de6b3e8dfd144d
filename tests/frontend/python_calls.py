"""A scripted model that calls Python: an ``@torch.jit.ignore`` function (with a scalar
TorchScript fixes at compile time) and a module held as a Python value."""

import torch

CALLS: list[int] = []
LIN = torch.nn.Linear(6, 4).eval()


@torch.jit.ignore
def scaled(x: torch.Tensor, k: int) -> torch.Tensor:
    CALLS.append(k)
    return x * k


def calls_python(x: torch.Tensor) -> torch.Tensor:
    return torch.relu(LIN(torch.tanh(x))).sum(1, keepdim=True) + scaled(x, 3)
