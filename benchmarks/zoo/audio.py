"""1-D audio models on raw waveforms: a conv1d feature extractor with a GRU (scripted), and
a small Hugging Face Wav2Vec2 from a config (traced)."""

from __future__ import annotations

import torch
from torch import Tensor, nn

from .spec import SCRIPT, TRACE, ZooModel, hf_config

FAMILY = "audio"
SAMPLES = 4000  # a quarter of a second at 16 kHz


class ConvGRUClassifier(nn.Module):
    """Strided conv1d + GroupNorm/BatchNorm + GELU feature extractor (four layers, 400× down-
    sampling), a GRU over the frames, mean and max pooling over time, a linear classifier."""

    def __init__(self, channels: int = 64, hidden: int = 64, classes: int = 12):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv1d(1, channels, 10, 5, bias=False), nn.GroupNorm(channels, channels),
            nn.GELU(),
            nn.Conv1d(channels, channels, 5, 4, bias=False), nn.BatchNorm1d(channels), nn.GELU(),
            nn.Conv1d(channels, channels, 5, 4, bias=False), nn.BatchNorm1d(channels), nn.GELU(),
            nn.Conv1d(channels, channels, 3, 5, bias=False), nn.BatchNorm1d(channels), nn.GELU())
        self.gru = nn.GRU(channels, hidden, batch_first=True)
        self.head = nn.Linear(2 * hidden, classes)

    def forward(self, waveform: Tensor) -> Tensor:
        x = self.features(waveform.unsqueeze(1)).transpose(1, 2)
        out, _ = self.gru(x)
        pooled = torch.cat([out.mean(dim=1), out.amax(dim=1)], dim=1)
        return self.head(pooled)


def _wav2vec2() -> nn.Module:
    import transformers

    return transformers.Wav2Vec2Model(hf_config(
        transformers.Wav2Vec2Config, conv_dim=(32, 32, 32, 32), conv_kernel=(10, 5, 3, 3),
        conv_stride=(5, 4, 2, 2), hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
        intermediate_size=128, num_conv_pos_embeddings=16, num_conv_pos_embedding_groups=4,
        mask_time_prob=0.0))


def _waveform(batch: int, g: torch.Generator) -> tuple:
    return (torch.randn(batch, SAMPLES, generator=g) * 0.1,)


MODELS = [
    ZooModel("conv1d_gru_audio", FAMILY, "4 strided conv1d + norm + GELU on a 4000-sample "
             "waveform, GRU, mean/max pooling, classifier", (1, 8), ConvGRUClassifier,
             _waveform, SCRIPT),
    ZooModel("hf_wav2vec2", FAMILY, "Wav2Vec2Model: 4-layer conv feature encoder, positional "
             "conv, 2 transformer layers, hidden 64; 4000 samples", (1, 4), _wav2vec2,
             _waveform, TRACE),
]
