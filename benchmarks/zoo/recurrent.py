"""Recurrent models, scripted: an LSTM classifier, a bidirectional GRU tagger, and a greedy
decoder whose ``while`` loop stops at an end token."""

from __future__ import annotations

import torch
from torch import Tensor, nn

from .spec import SCRIPT, ZooModel

FAMILY = "recurrent"


class LSTMClassifier(nn.Module):
    """Token embedding, a 2-layer LSTM, a linear head on the last step's hidden state."""

    def __init__(self, vocab: int = 500, dim: int = 64, hidden: int = 96, classes: int = 10):
        super().__init__()
        self.embedding = nn.Embedding(vocab, dim)
        self.lstm = nn.LSTM(dim, hidden, num_layers=2, batch_first=True)
        self.head = nn.Linear(hidden, classes)

    def forward(self, tokens: Tensor) -> Tensor:
        _, (h, _) = self.lstm(self.embedding(tokens))
        return self.head(h[-1])


class GRUTagger(nn.Module):
    """A bidirectional GRU over feature frames and a per-frame linear tagger."""

    def __init__(self, features: int = 32, hidden: int = 48, tags: int = 12):
        super().__init__()
        self.gru = nn.GRU(features, hidden, num_layers=1, batch_first=True, bidirectional=True)
        self.tagger = nn.Linear(2 * hidden, tags)

    def forward(self, frames: Tensor) -> Tensor:
        out, _ = self.gru(frames)
        return torch.log_softmax(self.tagger(out), dim=-1)


class GreedyDecoder(nn.Module):
    """Encodes a feature vector into a GRU cell's state, then decodes greedily: embed the
    last token, step the cell, take the argmax; stops when every sequence has produced the
    end token or after ``max_length`` steps. Returns the tokens ``(batch, steps)``."""

    def __init__(self, features: int = 32, vocab: int = 40, dim: int = 32, hidden: int = 64,
                 max_length: int = 24, bos: int = 1, eos: int = 2):
        super().__init__()
        self.encoder = nn.Linear(features, hidden)
        self.embedding = nn.Embedding(vocab, dim)
        self.cell = nn.GRUCell(dim, hidden)
        self.out = nn.Linear(hidden, vocab)
        self.max_length = max_length
        self.bos = bos
        self.eos = eos

    def forward(self, features: Tensor) -> Tensor:
        h = torch.tanh(self.encoder(features))
        token = torch.full([features.size(0)], self.bos, dtype=torch.long)
        finished = torch.zeros([features.size(0)], dtype=torch.bool)
        tokens: list[Tensor] = []
        step = 0
        while step < self.max_length:
            h = self.cell(self.embedding(token), h)
            token = self.out(h).argmax(dim=-1)
            token = torch.where(finished, torch.full_like(token, self.eos), token)
            tokens.append(token)
            finished = finished | (token == self.eos)
            if bool(finished.all()):
                break
            step += 1
        return torch.stack(tokens, dim=1)


def _tokens(batch: int, g: torch.Generator) -> tuple:
    return (torch.randint(0, 500, (batch, 20), generator=g),)


def _frames(batch: int, g: torch.Generator) -> tuple:
    return (torch.randn(batch, 24, 32, generator=g),)


def _features(batch: int, g: torch.Generator) -> tuple:
    return (torch.randn(batch, 32, generator=g) * 3,)


MODELS = [
    ZooModel("lstm_classifier", FAMILY, "embedding + 2-layer nn.LSTM (hidden 96) over 20 "
             "tokens + linear head", (1, 8), LSTMClassifier, _tokens, SCRIPT),
    ZooModel("gru_tagger", FAMILY, "bidirectional nn.GRU (hidden 48) over 24 frames + "
             "per-frame log-softmax tagger", (1, 8), GRUTagger, _frames, SCRIPT),
    ZooModel("greedy_decoder", FAMILY, "GRUCell + embedding + argmax in a while loop that "
             "breaks on the end token (≤ 24 steps)", (1, 8), GreedyDecoder, _features, SCRIPT),
]
