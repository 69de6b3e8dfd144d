"""Recommendation models, scripted: sparse features through embedding tables gathered into
lists in loops, a DCN-v2 cross network, DLRM's pairwise dot-product interaction, a two-tower
retrieval scorer."""

from __future__ import annotations

import torch
from torch import Tensor, nn

from .spec import SCRIPT, ZooModel

FAMILY = "recommendation"
TABLES, ROWS, DENSE = 8, 1000, 13


def _mlp(sizes: list[int], last_relu: bool = True) -> nn.Sequential:
    layers: list[nn.Module] = []
    for k in range(len(sizes) - 1):
        layers.append(nn.Linear(sizes[k], sizes[k + 1]))
        if last_relu or k < len(sizes) - 2:
            layers.append(nn.ReLU())
    return nn.Sequential(*layers)


class EmbeddingMLP(nn.Module):
    """One ``nn.Embedding`` per sparse feature, looked up in a ``for`` loop over the tables
    into a list, concatenated with the bottom MLP's output, then a top MLP."""

    def __init__(self, dim: int = 16):
        super().__init__()
        self.tables = nn.ModuleList([nn.Embedding(ROWS, dim) for _ in range(TABLES)])
        self.bottom = _mlp([DENSE, 64, dim])
        self.top = _mlp([dim * (TABLES + 1), 128, 64, 1], last_relu=False)

    def forward(self, dense: Tensor, sparse: Tensor) -> Tensor:
        features: list[Tensor] = [self.bottom(dense)]
        for i, table in enumerate(self.tables):
            features.append(table(sparse[:, i]))
        return torch.sigmoid(self.top(torch.cat(features, dim=1)))


class CrossNetwork(nn.Module):
    """DCN-v2 (arXiv:2008.13535): multi-hot ``EmbeddingBag`` features and dense features,
    three cross layers ``x = x0 * W x + b + x`` beside a deep tower, then a logit."""

    def __init__(self, dim: int = 8, crosses: int = 3):
        super().__init__()
        self.bags = nn.ModuleList([nn.EmbeddingBag(ROWS, dim, mode="sum")
                                   for _ in range(TABLES)])
        width = DENSE + TABLES * dim
        self.crosses = nn.ModuleList([nn.Linear(width, width) for _ in range(crosses)])
        self.deep = _mlp([width, 128, 64])
        self.head = nn.Linear(width + 64, 1)

    def forward(self, dense: Tensor, sparse: Tensor) -> Tensor:
        pooled = [dense]
        for i, bag in enumerate(self.bags):
            pooled.append(bag(sparse[:, i]))
        x0 = torch.cat(pooled, dim=1)
        x = x0
        for cross in self.crosses:
            x = x0 * cross(x) + x
        return self.head(torch.cat([x, self.deep(x0)], dim=1))


class DotInteraction(nn.Module):
    """DLRM (arXiv:1906.00091) as facebookresearch/dlrm writes it: multi-hot ``EmbeddingBag``
    features fed flat with offsets (one bag per sample per table), the bottom MLP's output
    and the pooled embeddings stacked, every pair's dot product by one ``bmm``, the strictly
    lower triangle gathered with constant indices, concatenated with the dense features, a
    top MLP."""

    def __init__(self, dim: int = 16):
        super().__init__()
        self.bags = nn.ModuleList([nn.EmbeddingBag(ROWS, dim, mode="sum")
                                   for _ in range(TABLES)])
        self.bottom = _mlp([DENSE, 64, dim])
        pairs = (TABLES + 1) * TABLES // 2
        self.top = _mlp([dim + pairs, 64, 32, 1], last_relu=False)
        rows, cols = torch.tril_indices(TABLES + 1, TABLES + 1, offset=-1)
        self.register_buffer("rows", rows, persistent=False)
        self.register_buffer("cols", cols, persistent=False)

    def forward(self, dense: Tensor, indices: Tensor, offsets: Tensor) -> Tensor:
        x = self.bottom(dense)
        features: list[Tensor] = [x]
        for i, bag in enumerate(self.bags):
            features.append(bag(indices[i], offsets[i]))
        t = torch.stack(features, dim=1)
        z = torch.bmm(t, t.transpose(1, 2))[:, self.rows, self.cols]
        return torch.sigmoid(self.top(torch.cat([x, z], dim=1)))


class TwoTower(nn.Module):
    """User and item towers (ID embedding + features through an MLP), L2-normalised; each
    user scored against every item of the batch (in-batch retrieval), top-k kept."""

    def __init__(self, dim: int = 32, k: int = 1):
        super().__init__()
        self.users = nn.Embedding(ROWS, dim)
        self.items = nn.Embedding(ROWS, dim)
        self.user_tower = _mlp([dim + DENSE, 64, dim], last_relu=False)
        self.item_tower = _mlp([dim + 6, 64, dim], last_relu=False)
        self.k = k
        self.temperature = 0.05

    def forward(self, user: Tensor, user_features: Tensor, item: Tensor,
                item_features: Tensor) -> tuple[Tensor, Tensor]:
        u = self.user_tower(torch.cat([self.users(user), user_features], dim=1))
        v = self.item_tower(torch.cat([self.items(item), item_features], dim=1))
        u = nn.functional.normalize(u, dim=1)
        v = nn.functional.normalize(v, dim=1)
        scores = u @ v.t() / self.temperature
        top = torch.topk(scores, self.k, dim=1)
        return top.values, top.indices


def _sparse(batch: int, g: torch.Generator) -> tuple:
    return (torch.randn(batch, DENSE, generator=g),
            torch.randint(0, ROWS, (batch, TABLES), generator=g))


def _multi_hot(batch: int, g: torch.Generator) -> tuple:
    return (torch.randn(batch, DENSE, generator=g),
            torch.randint(0, ROWS, (batch, TABLES, 4), generator=g))


def _bags(batch: int, g: torch.Generator) -> tuple:
    """Per table, ``batch`` bags of 1 to 6 indices, flat, with their start offsets (the same
    lengths for every table, as a batch of requests usually has)."""
    lengths = torch.randint(1, 7, (batch,), generator=g)
    offsets = torch.cumsum(lengths, 0) - lengths
    indices = torch.randint(0, ROWS, (TABLES, int(lengths.sum())), generator=g)
    return (torch.randn(batch, DENSE, generator=g), indices,
            offsets.unsqueeze(0).expand(TABLES, batch).contiguous())


def _towers(batch: int, g: torch.Generator) -> tuple:
    return (torch.randint(0, ROWS, (batch,), generator=g), torch.randn(batch, DENSE, generator=g),
            torch.randint(0, ROWS, (batch,), generator=g), torch.randn(batch, 6, generator=g))


MODELS = [
    ZooModel("embedding_mlp", FAMILY, "8 nn.Embedding tables looked up in a for loop into a "
             "list + cat, bottom and top MLPs", (1, 64), EmbeddingMLP, _sparse, SCRIPT),
    ZooModel("dcn_v2", FAMILY, "8 multi-hot EmbeddingBag tables, 3 DCN-v2 cross layers beside "
             "a deep tower", (1, 64), CrossNetwork, _multi_hot, SCRIPT),
    ZooModel("dlrm_dot", FAMILY, "DLRM: bottom MLP, 8 EmbeddingBag tables fed flat indices + "
             "offsets, pairwise dot interaction (bmm + tril gather), top MLP", (1, 64),
             DotInteraction, _bags, SCRIPT),
    ZooModel("two_tower", FAMILY, "user and item towers (ID embedding + MLP), normalised, "
             "in-batch scores, top-k", (1, 64), TwoTower, _towers, SCRIPT),
]
