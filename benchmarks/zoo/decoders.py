"""A causal decoder: Hugging Face GPT-2 (LM head) from a config, ``use_cache=False``, traced
on ``(input_ids, attention_mask)`` through the keyword-argument wrapper people write for it
(GPT-2's second positional parameter is ``past_key_values``)."""

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


def _inputs(batch: int, g: torch.Generator) -> tuple:
    return token_ids(g, batch, SEQ, VOCAB), padding_mask(g, batch, SEQ)


MODELS = [
    ZooModel("hf_gpt2", FAMILY, "GPT2LMHeadModel, 2 layers, 128 wide, 4 heads, seq 32, "
             "padded mask, LM head over 1000 tokens", (1, 4), _gpt2, _inputs, TRACE),
]
