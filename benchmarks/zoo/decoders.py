"""Causal decoders from Hugging Face configs, ``use_cache=False``, traced on ``(input_ids,
attention_mask)`` through the keyword-argument wrapper people write for them (the second
positional parameter is ``past_key_values`` or ``position_ids``, not the mask): GPT-2 with its
LM head, and a LLaMA-style body (RMSNorm, rotary embeddings, grouped-query attention,
SiLU-gated MLP). Traced without the mask, LLaMA's causal-mask code keeps the traced batch
size (the TorchScript interpreter fails at batch 4), so the mask is an input."""

from __future__ import annotations

import torch
from torch import Tensor, nn

from .spec import TRACE, ZooModel, hf_config, padding_mask, token_ids

FAMILY = "transformer decoder"
VOCAB, SEQ = 1000, 32


class CausalLM(nn.Module):
    """``logits = model(input_ids=..., attention_mask=...).logits``."""

    def __init__(self, model: nn.Module):
        super().__init__()
        self.model = model

    def forward(self, input_ids: Tensor, attention_mask: Tensor) -> Tensor:
        return self.model(input_ids=input_ids, attention_mask=attention_mask).logits


def _gpt2() -> nn.Module:
    import transformers

    return CausalLM(transformers.GPT2LMHeadModel(hf_config(
        transformers.GPT2Config, vocab_size=VOCAB, n_positions=64, n_embd=128, n_layer=2,
        n_head=4, use_cache=False, bos_token_id=0, eos_token_id=0,
        # transformers 5's GPT2LMHeadModel reads its body's output as a dict
        return_dict=True)))


class DecoderBody(nn.Module):
    """``hidden = model(input_ids=..., attention_mask=...)[0]`` (``return_dict=False``)."""

    def __init__(self, model: nn.Module):
        super().__init__()
        self.model = model

    def forward(self, input_ids: Tensor, attention_mask: Tensor) -> Tensor:
        return self.model(input_ids=input_ids, attention_mask=attention_mask)[0]


def _llama() -> nn.Module:
    import transformers

    return DecoderBody(transformers.LlamaModel(hf_config(
        transformers.LlamaConfig, vocab_size=VOCAB, hidden_size=128, intermediate_size=256,
        num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
        max_position_embeddings=64, use_cache=False)))


def _inputs(batch: int, g: torch.Generator) -> tuple:
    return token_ids(g, batch, SEQ, VOCAB), padding_mask(g, batch, SEQ)


MODELS = [
    ZooModel("hf_gpt2", FAMILY, "GPT2LMHeadModel, 2 layers, 128 wide, 4 heads, seq 32, "
             "padded mask, LM head over 1000 tokens", (1, 4), _gpt2, _inputs, TRACE),
    ZooModel("hf_llama", FAMILY, "LlamaModel, 2 layers, 128 wide, 4 query and 2 key-value "
             "heads (grouped-query), RMSNorm, rotary, SiLU-gated MLP 256, seq 32, padded mask",
             (1, 4), _llama, _inputs, TRACE),
]
