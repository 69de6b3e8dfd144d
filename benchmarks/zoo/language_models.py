"""Hand-written language models, scripted, as people write them outside Hugging Face (Meta's
reference LLaMA, nanoGPT and its descendants): a LLaMA-style decoder — RMSNorm, rotary
embeddings on real cos/sin tables, grouped-query attention with the key-value heads repeated
by ``expand`` + ``reshape`` (Meta's ``repeat_kv``), an explicit causal mask, a SiLU-gated MLP —
and a Mixtral-style sparse mixture of experts: a router's top-2 experts per token, each
expert run on the tokens sent to it (``torch.where`` on the routing, gather, ``index_add_``),
so the shapes inside depend on the data."""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from .spec import SCRIPT, ZooModel, token_ids

VOCAB, SEQ = 1000, 32


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float = 1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: Tensor) -> Tensor:
        return self.weight * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps))


def _rotate_half(x: Tensor) -> Tensor:
    half = x.size(-1) // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def _rotary_buffers(module: nn.Module, head_dim: int, max_len: int,
                    theta: float = 10000.0) -> None:
    """The rotary embedding's cos and sin tables and the causal mask, as buffers (not saved)."""
    inv_freq = 1.0 / theta ** (torch.arange(0, head_dim, 2).float() / head_dim)
    angles = torch.outer(torch.arange(max_len).float(), inv_freq)
    angles = torch.cat((angles, angles), dim=-1)
    module.register_buffer("cos", angles.cos(), persistent=False)
    module.register_buffer("sin", angles.sin(), persistent=False)
    module.register_buffer("mask", torch.full((max_len, max_len), float("-inf")).triu(1),
                           persistent=False)


class GroupedQueryAttention(nn.Module):
    """Causal self-attention with ``heads`` query heads sharing ``kv_heads`` key-value heads;
    rotary embeddings on queries and keys."""

    def __init__(self, dim: int, heads: int, kv_heads: int):
        super().__init__()
        self.heads, self.kv_heads, self.head_dim = heads, kv_heads, dim // heads
        self.repeats = heads // kv_heads
        self.wq = nn.Linear(dim, heads * self.head_dim, bias=False)
        self.wk = nn.Linear(dim, kv_heads * self.head_dim, bias=False)
        self.wv = nn.Linear(dim, kv_heads * self.head_dim, bias=False)
        self.wo = nn.Linear(heads * self.head_dim, dim, bias=False)

    def _repeat_kv(self, x: Tensor) -> Tensor:
        b, h, t, d = x.shape
        return x[:, :, None, :, :].expand(b, h, self.repeats, t, d).reshape(
            b, h * self.repeats, t, d)

    def forward(self, x: Tensor, cos: Tensor, sin: Tensor, mask: Tensor) -> Tensor:
        b, t, _ = x.shape
        q = self.wq(x).view(b, t, self.heads, self.head_dim).transpose(1, 2)
        k = self.wk(x).view(b, t, self.kv_heads, self.head_dim).transpose(1, 2)
        v = self.wv(x).view(b, t, self.kv_heads, self.head_dim).transpose(1, 2)
        q = q * cos + _rotate_half(q) * sin
        k = k * cos + _rotate_half(k) * sin
        k, v = self._repeat_kv(k), self._repeat_kv(v)
        scores = torch.matmul(q, k.transpose(2, 3)) / math.sqrt(self.head_dim)
        probs = torch.softmax(scores + mask, dim=-1)
        out = torch.matmul(probs, v).transpose(1, 2).reshape(b, t, -1)
        return self.wo(out)


class GatedMLP(nn.Module):
    def __init__(self, dim: int, hidden: int):
        super().__init__()
        self.w1 = nn.Linear(dim, hidden, bias=False)
        self.w3 = nn.Linear(dim, hidden, bias=False)
        self.w2 = nn.Linear(hidden, dim, bias=False)

    def forward(self, x: Tensor) -> Tensor:
        return self.w2(nn.functional.silu(self.w1(x)) * self.w3(x))


class DecoderLayer(nn.Module):
    def __init__(self, dim: int, heads: int, kv_heads: int, hidden: int):
        super().__init__()
        self.attention_norm = RMSNorm(dim)
        self.attention = GroupedQueryAttention(dim, heads, kv_heads)
        self.ffn_norm = RMSNorm(dim)
        self.feed_forward = GatedMLP(dim, hidden)

    def forward(self, x: Tensor, cos: Tensor, sin: Tensor, mask: Tensor) -> Tensor:
        h = x + self.attention(self.attention_norm(x), cos, sin, mask)
        return h + self.feed_forward(self.ffn_norm(h))


class LlamaStyle(nn.Module):
    """Token embedding, decoder layers, a final RMSNorm and an LM head; the rotary tables
    and the causal mask are buffers sliced to the sequence length."""

    def __init__(self, dim: int = 128, layers: int = 2, heads: int = 4, kv_heads: int = 2,
                 hidden: int = 352, max_len: int = 64, theta: float = 10000.0):
        super().__init__()
        self.embedding = nn.Embedding(VOCAB, dim)
        self.layers = nn.ModuleList([DecoderLayer(dim, heads, kv_heads, hidden)
                                     for _ in range(layers)])
        self.norm = RMSNorm(dim)
        self.output = nn.Linear(dim, VOCAB, bias=False)
        _rotary_buffers(self, dim // heads, max_len, theta)

    def forward(self, tokens: Tensor) -> Tensor:
        t = tokens.size(1)
        cos, sin, mask = self.cos[:t], self.sin[:t], self.mask[:t, :t]
        h = self.embedding(tokens)
        for layer in self.layers:
            h = layer(h, cos, sin, mask)
        return self.output(self.norm(h))


class SparseMoE(nn.Module):
    """Mixtral's sparse MoE block: softmax over the router's logits, the top ``k`` experts
    per token with their weights renormalised, each expert (a SiLU-gated MLP) applied to the
    tokens routed to it and its weighted output added back at their rows."""

    def __init__(self, dim: int, hidden: int, experts: int, k: int):
        super().__init__()
        self.k = k
        self.router = nn.Linear(dim, experts, bias=False)
        self.experts = nn.ModuleList([GatedMLP(dim, hidden) for _ in range(experts)])

    def forward(self, x: Tensor) -> Tensor:
        b, t, d = x.shape
        h = x.reshape(-1, d)
        weights, chosen = torch.topk(torch.softmax(self.router(h), dim=-1), self.k, dim=-1)
        weights = weights / weights.sum(dim=-1, keepdim=True)
        out = torch.zeros_like(h)
        for e, expert in enumerate(self.experts):
            rows, slot = torch.where(chosen == e)
            if rows.numel() > 0:
                y = expert(h[rows]) * weights[rows, slot].unsqueeze(-1)
                out.index_add_(0, rows, y)
        return out.reshape(b, t, d)


class MoEEncoder(nn.Module):
    """Token embedding, two pre-norm blocks of causal grouped-query attention and a sparse
    MoE feed-forward (8 experts, top 2), the last position's state through a classifier."""

    def __init__(self, dim: int = 64, layers: int = 2, experts: int = 8, classes: int = 16,
                 max_len: int = 64):
        super().__init__()
        self.embedding = nn.Embedding(VOCAB, dim)
        self.attention_norms = nn.ModuleList([RMSNorm(dim) for _ in range(layers)])
        self.attentions = nn.ModuleList([GroupedQueryAttention(dim, 4, 2)
                                         for _ in range(layers)])
        self.moe_norms = nn.ModuleList([RMSNorm(dim) for _ in range(layers)])
        self.moes = nn.ModuleList([SparseMoE(dim, 2 * dim, experts, 2) for _ in range(layers)])
        self.head = nn.Linear(dim, classes)
        _rotary_buffers(self, dim // 4, max_len)

    def forward(self, tokens: Tensor) -> Tensor:
        t = tokens.size(1)
        cos, sin, mask = self.cos[:t], self.sin[:t], self.mask[:t, :t]
        h = self.embedding(tokens)
        for norm, attention, moe_norm, moe in zip(self.attention_norms, self.attentions,
                                                  self.moe_norms, self.moes):
            h = h + attention(norm(h), cos, sin, mask)
            h = h + moe(moe_norm(h))
        return self.head(h[:, -1])


def _tokens(batch: int, g: torch.Generator) -> tuple:
    return (token_ids(g, batch, SEQ, VOCAB),)


def _short_tokens(batch: int, g: torch.Generator) -> tuple:
    return (token_ids(g, batch, 16, VOCAB),)


MODELS = [
    ZooModel("llama_scripted", "transformer decoder", "hand-written LLaMA-style decoder: 2 "
             "layers, 128 wide, 4 query / 2 key-value heads (repeat_kv), RMSNorm, rotary, "
             "causal mask, SiLU-gated MLP 352, LM head over 1000 tokens, seq 32", (1, 4),
             LlamaStyle, _tokens, SCRIPT),
    ZooModel("moe_top2", "mixture of experts", "Mixtral-style sparse MoE: 2 blocks of "
             "grouped-query attention + 8 SiLU-gated experts, top-2 routing (where, gather, "
             "index_add_), 64 wide, seq 16, last-token classifier", (1, 8), MoEEncoder, _short_tokens,
             SCRIPT),
]
