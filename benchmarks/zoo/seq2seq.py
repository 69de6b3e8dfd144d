"""Encoder-decoders from Hugging Face configs, traced on ``(input_ids, attention_mask,
decoder_input_ids)`` (one teacher-forced pass, no cache) through a keyword-argument wrapper
returning the decoder's and the encoder's last hidden states (transformers 5's T5 and BART
read their own sub-modules' outputs as dicts, so ``return_dict=False`` is not available)."""

from __future__ import annotations

import torch
from torch import Tensor, nn

from .spec import TRACE, ZooModel, hf_config, padding_mask, token_ids

FAMILY = "encoder-decoder"
VOCAB, SRC, TGT = 1000, 24, 12


class EncoderDecoder(nn.Module):
    def __init__(self, model: nn.Module):
        super().__init__()
        self.model = model

    def forward(self, input_ids: Tensor, attention_mask: Tensor,
                decoder_input_ids: Tensor) -> tuple[Tensor, Tensor]:
        out = self.model(input_ids=input_ids, attention_mask=attention_mask,
                         decoder_input_ids=decoder_input_ids)
        return out.last_hidden_state, out.encoder_last_hidden_state


def _inputs(batch: int, g: torch.Generator) -> tuple:
    return (token_ids(g, batch, SRC, VOCAB), padding_mask(g, batch, SRC),
            token_ids(g, batch, TGT, VOCAB))


def _t5() -> torch.nn.Module:
    import transformers

    return EncoderDecoder(transformers.T5Model(hf_config(
        transformers.T5Config, vocab_size=VOCAB, d_model=64, d_kv=16, d_ff=128, num_layers=2,
        num_decoder_layers=2, num_heads=4, use_cache=False, return_dict=True)))


def _bart() -> torch.nn.Module:
    import transformers

    return EncoderDecoder(transformers.BartModel(hf_config(
        transformers.BartConfig, vocab_size=VOCAB, d_model=64, encoder_layers=2,
        decoder_layers=2, encoder_attention_heads=4, decoder_attention_heads=4,
        encoder_ffn_dim=128, decoder_ffn_dim=128, max_position_embeddings=64,
        use_cache=False, return_dict=True)))


MODELS = [
    ZooModel("hf_t5", FAMILY, "T5Model, 2+2 layers, d_model 64, 4 heads, relative position "
             "bias, source 24 / target 12 tokens", (1, 4), _t5, _inputs, TRACE),
    ZooModel("hf_bart", FAMILY, "BartModel, 2+2 layers, d_model 64, 4 heads, source 24 / "
             "target 12 tokens", (1, 4), _bart, _inputs, TRACE),
]
