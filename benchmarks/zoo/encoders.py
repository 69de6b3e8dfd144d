"""Transformer encoders from Hugging Face ``transformers`` configs, traced on
``(input_ids, attention_mask)`` as HF's TorchScript guide does; and a sentence-embedding model
as sentence-transformers serves one: a MiniLM-shaped BERT, the token states mean-pooled under
the attention mask, L2-normalised."""

from __future__ import annotations

import torch
from torch import Tensor, nn

from .spec import TRACE, ZooModel, hf_config, padding_mask, token_ids

FAMILY = "transformer encoder"
VOCAB, SEQ = 1000, 32


def _text_inputs(batch: int, g: torch.Generator) -> tuple:
    return token_ids(g, batch, SEQ, VOCAB), padding_mask(g, batch, SEQ)


def _bert() -> torch.nn.Module:
    import transformers

    return transformers.BertModel(hf_config(
        transformers.BertConfig, vocab_size=VOCAB, hidden_size=128, num_hidden_layers=2,
        num_attention_heads=2, intermediate_size=512, max_position_embeddings=64))


def _distilbert() -> torch.nn.Module:
    import transformers

    return transformers.DistilBertModel(hf_config(
        transformers.DistilBertConfig, vocab_size=VOCAB, dim=128, n_layers=2, n_heads=4,
        hidden_dim=256, max_position_embeddings=64))


def _roberta() -> torch.nn.Module:
    import transformers

    return transformers.RobertaModel(hf_config(
        transformers.RobertaConfig, vocab_size=VOCAB, hidden_size=96, num_hidden_layers=3,
        num_attention_heads=3, intermediate_size=384, max_position_embeddings=64 + 2))


class SentenceEmbedder(nn.Module):
    """sentence-transformers' ``Transformer`` → ``Pooling(mean)`` → ``Normalize``: the mean of
    the unpadded tokens' last hidden states, divided by its L2 norm."""

    def __init__(self, model: nn.Module):
        super().__init__()
        self.model = model

    def forward(self, input_ids: Tensor, attention_mask: Tensor) -> Tensor:
        states = self.model(input_ids=input_ids, attention_mask=attention_mask)[0]
        mask = attention_mask.unsqueeze(-1).to(states.dtype)
        pooled = (states * mask).sum(dim=1) / mask.sum(dim=1).clamp(min=1e-9)
        return nn.functional.normalize(pooled, p=2.0, dim=1)


def _minilm() -> torch.nn.Module:
    import transformers

    return SentenceEmbedder(transformers.BertModel(hf_config(
        transformers.BertConfig, vocab_size=VOCAB, hidden_size=96, num_hidden_layers=3,
        num_attention_heads=6, intermediate_size=384, max_position_embeddings=64),
        add_pooling_layer=False))


MODELS = [
    ZooModel("hf_bert", FAMILY, "BertModel, 2 layers, hidden 128, 2 heads, seq 32, padded mask",
             (1, 8), _bert, _text_inputs, TRACE),
    ZooModel("hf_distilbert", FAMILY, "DistilBertModel, 2 layers, dim 128, 4 heads, seq 32",
             (1, 8), _distilbert, _text_inputs, TRACE),
    ZooModel("hf_roberta", FAMILY, "RobertaModel, 3 layers, hidden 96, 3 heads, seq 32",
             (1, 8), _roberta, _text_inputs, TRACE),
    ZooModel("sentence_embedder", FAMILY, "MiniLM-shaped BertModel (3 layers, hidden 96, 6 "
             "heads) + masked mean pooling + L2 normalisation, seq 32, padded mask", (1, 8),
             _minilm, _text_inputs, TRACE),
]
