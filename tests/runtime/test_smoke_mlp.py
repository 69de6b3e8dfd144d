import torch
from differential import check


class MLP(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = torch.nn.ModuleList([torch.nn.Linear(64, 64) for _ in range(3)])

    def forward(self, x):
        for layer in self.layers:
            x = torch.relu(layer(x))
        return x


def test_mlp_matches_interpreter():
    check(MLP(), [torch.randn(1, 64)], [torch.randn(7, 64)])
