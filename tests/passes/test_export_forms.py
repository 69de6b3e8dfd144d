"""What ``torch.export`` writes differently from TorchScript, and the rewrites that must still
find it: an RMS norm whose normalised value ``_assert_tensor_metadata`` checks before the cast
(Hugging Face's LlamaRMSNorm), and an LSTM whose weights come as a list built of constants —
each fused or measured as from TorchScript, with eager's answers on two shape sets."""

import torch
from measured import MEASURE, fresh_kernel_cache  # noqa: F401
from passes_helpers import kinds
from torch import nn
from torch.export import Dim

import static_runtime as sr


class HFRMSNorm(nn.Module):
    def __init__(self, h: int = 24, eps: float = 1e-6):
        super().__init__()
        torch.manual_seed(h)
        self.weight = nn.Parameter(torch.rand(h) + 0.5)
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        dtype = x.dtype
        x = x.to(torch.float32)
        x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * x.to(dtype)


class LSTMHead(nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(2)
        # (weights of more than 1,024 elements: a list of them is folded only as the graph's
        # own constants, not as new ones)
        self.lstm = nn.LSTM(8, 32, num_layers=2, batch_first=True)
        self.head = nn.Linear(32, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        _, (h, _) = self.lstm(x)
        return self.head(h[-1])


def _exported(model: nn.Module, example: torch.Tensor) -> torch.export.ExportedProgram:
    return torch.export.export(model, (example,), dynamic_shapes=({0: Dim("b", min=1, max=64)},))


def test_an_exported_rms_norm_checked_before_its_cast_fuses():
    model = HFRMSNorm().eval()
    program = _exported(model, torch.randn(2, 5, 24))
    assert "_assert_tensor_metadata" in str(program.graph)
    mod = sr.StaticModule(program, MEASURE)
    assert "static_runtime::rms_norm" in kinds(mod.graph)
    assert "aten::rsqrt" not in kinds(mod.graph)
    for x in (torch.randn(2, 5, 24), torch.randn(7, 5, 24) * 3):
        before = x.clone()
        for _ in range(2):
            torch.testing.assert_close(mod(x), model(x), rtol=1e-5, atol=1e-5)
        assert torch.equal(x, before)


def test_an_exported_lstm_gets_its_weights_as_one_constant_and_is_measured():
    model = LSTMHead().eval()
    program = _exported(model, torch.randn(2, 6, 8))
    mod = sr.StaticModule(program, MEASURE)
    for x in (torch.randn(2, 6, 8), torch.randn(5, 6, 8)):
        with torch.no_grad():
            want = model(x)
        for _ in range(2):
            torch.testing.assert_close(mod(x), want, rtol=1e-4, atol=1e-5)
    assert "lstm: kernel chosen per batch and length bucket by measurement" in mod.describe()
