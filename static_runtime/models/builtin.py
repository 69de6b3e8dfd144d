"""Built-in example models: the workloads the demo CLI, the benchmarks and the tests share.

Each model is a plain ``nn.Module`` that ``torch.jit.script`` accepts, built without downloads
and initialised deterministically from a seed. They cover the kinds of models the runtime is
for (see DESIGN.md, "Who uses it"):

========================  =====================================================================
``mlp``                   an MLP tower: 3 × (Linear(64, 64) + ReLU)
``dlrm``                  a small DLRM (arXiv:1906.00091): dense bottom MLP, 8 sum-pooled
                          embedding bags, pairwise dot-product interaction, top MLP, sigmoid
``multi_head_attention``  self-attention written out with view/permute/matmul/softmax
``transformer_encoder``   ``nn.TransformerEncoderLayer(128, 4, 512, batch_first=True)``, whose
                          scripted graph has tensor identity (``is``) checks and a fast path
``resnet_small``          a conv stem and two basic blocks with BatchNorm, 56 × 56 images
``control_flow``          a data-dependent ``if`` and an 8-step loop carrying a tensor
``attribute_setter``      a forward that writes module attributes (``self.b = 20``) and reads them
``class_user``            a forward that builds a TorchScript class instance and calls it
========================  =====================================================================

    from static_runtime.models import MODELS
    spec = MODELS["dlrm"]
    model = spec.build()                    # eval mode, seeded
    inputs = spec.example_inputs(batch=4)   # a tuple of positional arguments
    out = model(*inputs)
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor, nn

__all__ = [
    "DLRM", "MLP", "MODELS", "AttributeSetter", "ClassUser", "ControlFlowModel", "ModelSpec",
    "MultiHeadAttention", "ResNetSmall", "RunningStats", "TransformerEncoder",
]


# --------------------------------------------------------------------------- MLP


class MLP(nn.Module):
    """An MLP tower: ``depth`` × (Linear(width, width) + ReLU). Input ``(batch, width)``."""

    def __init__(self, width: int = 64, depth: int = 3):
        super().__init__()
        layers: list[nn.Module] = []
        for _ in range(depth):
            layers += [nn.Linear(width, width), nn.ReLU()]
        self.layers = nn.Sequential(*layers)

    def forward(self, x: Tensor) -> Tensor:
        return self.layers(x)


# --------------------------------------------------------------------------- DLRM


def _mlp(sizes: list[int], final_activation: bool) -> nn.Sequential:
    layers: list[nn.Module] = []
    for k in range(len(sizes) - 1):
        layers.append(nn.Linear(sizes[k], sizes[k + 1]))
        if k < len(sizes) - 2 or final_activation:
            layers.append(nn.ReLU())
    return nn.Sequential(*layers)


class DLRM(nn.Module):
    """A small Deep Learning Recommendation Model (Naumov et al., arXiv:1906.00091).

    ``forward(dense, indices, offsets)``:

    * ``dense``: ``(batch, 13)`` float features → bottom MLP 13 → 512 → 256 → 64;
    * ``indices[t]``, ``offsets[t]`` for each of the 8 tables: the ``EmbeddingBag`` inputs
      (a flat int64 tensor of row ids, and the int64 start of each sample's bag), sum-pooled
      to ``(batch, 64)``;
    * interaction: the 9 feature vectors stacked to ``(batch, 9, 64)``, multiplied by their
      transpose with ``torch.bmm`` and the 36 pairwise dot products above the diagonal taken
      by index; concatenated with the dense features → top MLP 100 → 128 → 64 → 1, sigmoid.

    Returns the click probability, ``(batch, 1)``.
    """

    def __init__(self, num_tables: int = 8, rows: int = 1000, dim: int = 64,
                 dense_features: int = 13):
        super().__init__()
        self.bottom = _mlp([dense_features, 512, 256, dim], final_activation=True)
        self.embeddings = nn.ModuleList(
            [nn.EmbeddingBag(rows, dim, mode="sum") for _ in range(num_tables)])
        n = num_tables + 1
        rows_idx, cols_idx = torch.triu_indices(n, n, offset=1)
        self.register_buffer("tri_rows", rows_idx)
        self.register_buffer("tri_cols", cols_idx)
        self.top = _mlp([dim + n * (n - 1) // 2, 128, 64, 1], final_activation=False)

    def forward(self, dense: Tensor, indices: list[Tensor], offsets: list[Tensor]) -> Tensor:
        x = self.bottom(dense)
        features: list[Tensor] = [x]
        for t, table in enumerate(self.embeddings):
            features.append(table(indices[t], offsets[t]))
        stacked = torch.stack(features, dim=1)
        products = torch.bmm(stacked, stacked.transpose(1, 2))
        pairs = products[:, self.tri_rows, self.tri_cols]
        return torch.sigmoid(self.top(torch.cat([x, pairs], dim=1)))


def _dlrm_inputs(batch: int, generator: torch.Generator, num_tables: int = 8,
                 rows: int = 1000, max_bag: int = 4) -> tuple:
    dense = torch.randn(batch, 13, generator=generator)
    indices, offsets = [], []
    for _ in range(num_tables):
        lengths = torch.randint(1, max_bag + 1, (batch,), generator=generator)
        offsets.append(torch.cat([torch.zeros(1, dtype=torch.long), lengths.cumsum(0)[:-1]]))
        indices.append(torch.randint(0, rows, (int(lengths.sum()),), generator=generator))
    return dense, indices, offsets


# --------------------------------------------------------------------------- attention


class MultiHeadAttention(nn.Module):
    """Self-attention written out op by op (no fused kernels), as many served models are.

    Input ``(batch, seq, hidden)``; ``hidden`` split into ``heads`` of ``hidden // heads``.
    """

    def __init__(self, hidden: int = 256, heads: int = 8):
        super().__init__()
        if hidden % heads:
            raise ValueError(f"hidden ({hidden}) must be divisible by heads ({heads})")
        self.heads = heads
        self.head_dim = hidden // heads
        self.scale = 1.0 / math.sqrt(self.head_dim)
        self.q = nn.Linear(hidden, hidden)
        self.k = nn.Linear(hidden, hidden)
        self.v = nn.Linear(hidden, hidden)
        self.out = nn.Linear(hidden, hidden)

    def forward(self, x: Tensor) -> Tensor:
        b, s, h = x.size(0), x.size(1), x.size(2)
        q = self.q(x).view(b, s, self.heads, self.head_dim).permute(0, 2, 1, 3)
        k = self.k(x).view(b, s, self.heads, self.head_dim).permute(0, 2, 3, 1)
        v = self.v(x).view(b, s, self.heads, self.head_dim).permute(0, 2, 1, 3)
        weights = torch.softmax(torch.matmul(q, k) * self.scale, dim=-1)
        context = torch.matmul(weights, v).permute(0, 2, 1, 3).reshape(b, s, h)
        return self.out(context)


class TransformerEncoder(nn.Module):
    """``nn.TransformerEncoderLayer(128, 4, 512, batch_first=True)``, optional padding mask.

    Its scripted graph compares tensors by identity (``query is key``), which PyTorch's C++
    Static Runtime refuses, and in eval mode without autograd it may take the fused
    ``torch._transformer_encoder_layer_fwd`` path. Input ``(batch, seq, 128)``; the mask, if
    given, is ``(batch, seq)`` bool, True where a position is padding.
    """

    def __init__(self, d_model: int = 128, nhead: int = 4, dim_feedforward: int = 512):
        super().__init__()
        self.layer = nn.TransformerEncoderLayer(d_model, nhead, dim_feedforward,
                                                batch_first=True)

    def forward(self, src: Tensor, src_key_padding_mask: Tensor | None = None) -> Tensor:
        return self.layer(src, src_key_padding_mask=src_key_padding_mask)


# --------------------------------------------------------------------------- conv


class _BasicBlock(nn.Module):
    """ResNet's basic block (He et al., arXiv:1512.03385): two 3 × 3 convs and a shortcut."""

    def __init__(self, channels: int):
        super().__init__()
        self.conv1 = nn.Conv2d(channels, channels, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(channels)
        self.conv2 = nn.Conv2d(channels, channels, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(channels)
        self.relu = nn.ReLU()

    def forward(self, x: Tensor) -> Tensor:
        y = self.relu(self.bn1(self.conv1(x)))
        y = self.bn2(self.conv2(y))
        return self.relu(y + x)


class ResNetSmall(nn.Module):
    """A small ResNet: 3 → 32 conv stem (stride 2), two basic blocks of 32 channels,
    adaptive average pooling and a classifier. Input ``(batch, 3, 56, 56)``, output
    ``(batch, num_classes)``.

    BatchNorm running statistics are set to non-trivial values, so in eval mode (where
    freezing may fold them into the convolutions) they still change the result.
    """

    def __init__(self, channels: int = 32, num_classes: int = 10):
        super().__init__()
        self.stem = nn.Sequential(
            nn.Conv2d(3, channels, 3, stride=2, padding=1, bias=False),
            nn.BatchNorm2d(channels), nn.ReLU())
        self.blocks = nn.Sequential(_BasicBlock(channels), _BasicBlock(channels))
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(channels, num_classes)
        with torch.no_grad():
            for m in self.modules():
                if isinstance(m, nn.BatchNorm2d):
                    m.running_mean.uniform_(-0.1, 0.1)
                    m.running_var.uniform_(0.5, 1.5)
                    m.weight.uniform_(0.5, 1.5)
                    m.bias.uniform_(-0.1, 0.1)

    def forward(self, x: Tensor) -> Tensor:
        x = self.blocks(self.stem(x))
        return self.fc(torch.flatten(self.pool(x), 1))


# --------------------------------------------------------------------------- control flow


class ControlFlowModel(nn.Module):
    """Control flow that depends on data: which branch runs depends on the sign of the input's
    sum, then a loop of ``steps`` (default 8) iterations carries a tensor (a small recurrent
    refinement). Input ``(batch, 32)``, output ``(batch, 32)``.

    ``steps`` is an argument, not an attribute: freezing unrolls a loop whose trip count is
    a constant, and this model is meant to keep a real ``prim::Loop``.
    """

    def __init__(self, width: int = 32):
        super().__init__()
        self.positive = nn.Linear(width, width)
        self.negative = nn.Linear(width, width)
        self.step = nn.Linear(width, width)

    def forward(self, x: Tensor, steps: int = 8) -> Tensor:
        if bool(x.sum() > 0):
            h = torch.relu(self.positive(x))
        else:
            h = torch.tanh(self.negative(x))
        for i in range(steps):
            h = 0.5 * h + torch.tanh(self.step(h)) * (i + 1) / steps
        return h


# --------------------------------------------------------------------------- object state


class _Scaler(nn.Module):
    def __init__(self):
        super().__init__()
        self.scale = 1.0

    def forward(self, x: Tensor) -> Tensor:
        return x * self.scale


class AttributeSetter(nn.Module):
    """A forward that writes module attributes and then reads them: ``self.b = 20`` on
    itself, and the scale of a submodule set from the input's mean. Freezing cannot turn
    these attributes into constants. Input ``(batch, 16)``, output ``(batch, 16)``.
    """

    def __init__(self, width: int = 16):
        super().__init__()
        self.b = 10
        self.linear = nn.Linear(width, width)
        self.scaler = _Scaler()

    def forward(self, x: Tensor) -> Tensor:
        self.b = 20
        self.scaler.scale = float(x.mean()) + 1.0
        return self.scaler(self.linear(x)) + self.b


@torch.jit.script
class RunningStats:
    """Column sums and a row count over the batches given to ``update`` (a TorchScript class)."""

    def __init__(self, width: int):
        self.total = torch.zeros(width)
        self.count = 0

    def update(self, x: Tensor) -> None:
        self.total = self.total + x.sum(0)
        self.count += x.size(0)

    def mean(self) -> Tensor:
        return self.total / max(self.count, 1)


class ClassUser(nn.Module):
    """A forward that creates a TorchScript class instance (``RunningStats``) and calls its
    methods: it centres the input by the mean of the input and its double, then projects.
    Input ``(batch, 24)``, output ``(batch, 24)``.
    """

    def __init__(self, width: int = 24):
        super().__init__()
        self.linear = nn.Linear(width, width)

    def forward(self, x: Tensor) -> Tensor:
        stats = RunningStats(x.size(1))
        stats.update(x)
        stats.update(x * 2.0)
        return self.linear(x - stats.mean())


# --------------------------------------------------------------------------- the registry


@dataclass(frozen=True)
class ModelSpec:
    """A named example model.

    ``build(seed=0)`` returns a fresh model in eval mode, its weights drawn from ``seed``
    (the global random state is left as it was). ``example_inputs(batch, seed=0)`` returns a
    tuple of positional arguments for ``batch`` samples, also deterministic.
    """

    name: str
    description: str
    factory: Callable[[], nn.Module]
    make_inputs: Callable[[int, torch.Generator], tuple]

    def build(self, seed: int = 0) -> nn.Module:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            model = self.factory()
        return model.eval()

    def example_inputs(self, batch: int = 1, seed: int = 0) -> tuple:
        if batch < 1:
            raise ValueError(f"batch must be at least 1, got {batch}")
        return self.make_inputs(batch, torch.Generator().manual_seed(seed))


def _randn(*shape: int) -> Callable[[int, torch.Generator], tuple]:
    return lambda batch, g: (torch.randn(batch, *shape, generator=g),)


MODELS: dict[str, ModelSpec] = {
    spec.name: spec for spec in [
        ModelSpec("mlp", "3 x (Linear(64, 64) + ReLU)", MLP, _randn(64)),
        ModelSpec("dlrm", "DLRM: bottom MLP, 8 EmbeddingBags, dot interaction, top MLP",
                  DLRM, _dlrm_inputs),
        ModelSpec("multi_head_attention", "self-attention, hidden 256, 8 heads, seq 8",
                  MultiHeadAttention, _randn(8, 256)),
        ModelSpec("transformer_encoder", "nn.TransformerEncoderLayer(128, 4, 512), seq 32",
                  TransformerEncoder, _randn(32, 128)),
        ModelSpec("resnet_small", "conv stem + 2 basic blocks, 32 channels, 56 x 56 input",
                  ResNetSmall, _randn(3, 56, 56)),
        ModelSpec("control_flow", "data-dependent if + 8-step loop carrying a tensor",
                  ControlFlowModel, _randn(32)),
        ModelSpec("attribute_setter", "forward writes self.b and a submodule attribute",
                  AttributeSetter, _randn(16)),
        ModelSpec("class_user", "forward creates and calls a TorchScript class instance",
                  ClassUser, _randn(24)),
    ]
}
