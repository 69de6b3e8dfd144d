"""Audio models: on raw waveforms a conv1d feature extractor with a GRU (scripted) and a small
Hugging Face Wav2Vec2 (traced); on log-mel spectrograms a small Whisper encoder (traced), the
half of Whisper that speech pipelines run once per 30-second window."""

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


MEL_BINS, WHISPER_POSITIONS = 32, 50


def _whisper_encoder() -> nn.Module:
    import transformers

    config = hf_config(transformers.WhisperConfig, num_mel_bins=MEL_BINS, d_model=64,
                       encoder_layers=2, encoder_attention_heads=4, encoder_ffn_dim=256,
                       decoder_layers=1, decoder_attention_heads=4, decoder_ffn_dim=256,
                       max_source_positions=WHISPER_POSITIONS, vocab_size=1000,
                       pad_token_id=0, bos_token_id=1, eos_token_id=2,
                       decoder_start_token_id=1)
    return transformers.WhisperModel(config).get_encoder()


def _log_mel(batch: int, g: torch.Generator) -> tuple:
    # the encoder's two convolutions (the second strided by 2) must map the frames onto its
    # positions exactly: 2 × max_source_positions frames
    return (torch.randn(batch, MEL_BINS, 2 * WHISPER_POSITIONS, generator=g),)


def _waveform(batch: int, g: torch.Generator) -> tuple:
    return (torch.randn(batch, SAMPLES, generator=g) * 0.1,)


MODELS = [
    ZooModel("conv1d_gru_audio", FAMILY, "4 strided conv1d + norm + GELU on a 4000-sample "
             "waveform, GRU, mean/max pooling, classifier", (1, 8), ConvGRUClassifier,
             _waveform, SCRIPT),
    ZooModel("hf_wav2vec2", FAMILY, "Wav2Vec2Model: 4-layer conv feature encoder, positional "
             "conv, 2 transformer layers, hidden 64; 4000 samples", (1, 4), _wav2vec2,
             _waveform, TRACE),
    ZooModel("hf_whisper_encoder", FAMILY, "WhisperEncoder: conv1d stem (GELU, stride 2), "
             "sinusoidal positions, 2 pre-norm transformer layers, d_model 64, 4 heads; 32 mel "
             "bins × 100 frames", (1, 8), _whisper_encoder, _log_mel, TRACE),
]
