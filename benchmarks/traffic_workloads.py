"""What the traffic benchmark serves: deterministic request traces of varying sizes (text
lengths, dynamic batches, image sizes) and the three workloads that replay them, each a model,
how its peers get it, and its inputs and dynamic dimensions at each size."""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from benchmarks.zoo import ZOO
from benchmarks.zoo.spec import hf_config

MAX_LENGTH, MAX_BATCH = 256, 512
VOCAB = 1000

Size = tuple[int, ...]

def text_lengths(n: int, seed: int = 0) -> list[int]:
    """``n`` sentence lengths in tokens: log-normal (median 40, σ 0.75), rounded, clipped to
    8…256 — short sentences common, a long tail. Deterministic in ``seed``."""
    rng = np.random.default_rng(seed)
    raw = rng.lognormal(math.log(40), 0.75, n)
    return [int(x) for x in np.clip(np.rint(raw), 8, MAX_LENGTH)]


def batch_sizes(n: int, seed: int = 0) -> list[int]:
    """``n`` batch sizes as a dynamic batcher forms them: ``1 + Poisson(λ)``, λ log-normal
    (median 12, σ 1.1) as the request rate wanders, clipped to 512."""
    rng = np.random.default_rng(seed)
    rates = rng.lognormal(math.log(12), 1.1, n)
    return [int(x) for x in np.clip(1 + rng.poisson(rates), 1, MAX_BATCH)]


IMAGE_SIDES, IMAGE_BATCHES = (32, 48, 64, 96), (1, 2, 4)


def image_sizes(n: int, seed: int = 0) -> list[tuple[int, int]]:
    """``n`` (batch, side) pairs: sides 32/48/64/96 with probabilities .4/.3/.2/.1, batches
    1/2/4 with .6/.3/.1."""
    rng = np.random.default_rng(seed)
    sides = rng.choice(IMAGE_SIDES, n, p=(0.4, 0.3, 0.2, 0.1))
    batches = rng.choice(IMAGE_BATCHES, n, p=(0.6, 0.3, 0.1))
    return [(int(b), int(s)) for b, s in zip(batches, sides)]


@dataclass
class Workload:
    """A model and its traffic. ``trace(n, seed)`` gives request sizes, ``inputs(size)`` a
    request of that size; ``dynamic_shapes`` the ``torch.export`` spec (one ``Dim`` per
    varying axis) for the example ``inputs(example)``; ``axes`` the ONNX ``dynamic_axes``."""

    name: str
    description: str
    model: Callable[[], torch.nn.Module]
    script: Callable[[torch.nn.Module], torch.jit.ScriptModule]
    trace: Callable[[int, int], list]
    make_inputs: Callable[[Any, torch.Generator], tuple]
    dynamic_shapes: Callable[[], tuple]
    axes: dict[str, dict[int, str]]
    example: Any
    requests: int
    _cache: dict = field(default_factory=dict, repr=False)

    def inputs(self, size: Any) -> tuple:
        """The request of ``size`` (one per size, drawn from a seed made of the size)."""
        if size not in self._cache:
            seed = hash(size) & 0xFFFF
            self._cache[size] = self.make_inputs(size, torch.Generator().manual_seed(seed))
        return self._cache[size]

    def request(self, size: Any, i: int) -> tuple:
        """The ``i``-th request of ``size``: ``inputs(size)`` for 0, else the same shapes with
        values of their own (not kept) — what a service's next request of that size brings;
        a call repeated on the same values finds what it reads in the caches (a
        recommender's table rows: its call ~20 % faster here)."""
        if i == 0:
            return self.inputs(size)
        seed = (hash(size) + 7919 * i) & 0xFFFF
        return self.make_inputs(size, torch.Generator().manual_seed(seed))


def _bert() -> torch.nn.Module:
    import transformers

    with torch.random.fork_rng():
        torch.manual_seed(0)
        return transformers.BertModel(hf_config(
            transformers.BertConfig, vocab_size=VOCAB, hidden_size=128, num_hidden_layers=2,
            num_attention_heads=2, intermediate_size=512,
            max_position_embeddings=MAX_LENGTH)).eval()


def _trace_bert(model: torch.nn.Module) -> torch.jit.ScriptModule:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return torch.jit.trace(model, _sentence(32, torch.Generator().manual_seed(0)),
                               check_trace=False, strict=False).eval()


def _sentence(length: int, g: torch.Generator) -> tuple:
    return (torch.randint(0, VOCAB, (1, length), generator=g),
            torch.ones(1, length, dtype=torch.long))


def _script(model: torch.nn.Module) -> torch.jit.ScriptModule:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return torch.jit.script(model).eval()


def _dims(*specs: tuple[str, int, int]) -> dict:
    return {name: torch.export.Dim(name, min=lo, max=hi) for name, lo, hi in specs}


def _text_shapes() -> tuple:
    d = _dims(("seq", 8, MAX_LENGTH))
    return ({1: d["seq"]}, {1: d["seq"]})


def _recsys_shapes() -> tuple:
    d = _dims(("batch", 1, MAX_BATCH))
    return ({0: d["batch"]}, {0: d["batch"]})


def _conv_shapes() -> tuple:
    d = _dims(("batch", 1, 4), ("side", 32, 96))
    return ({0: d["batch"], 2: d["side"], 3: d["side"]},)


WORKLOADS: dict[str, Workload] = {
    "text": Workload(
        "text", "BertModel 2×128 traced, batch 1, lengths log-normal 8…256",
        _bert, _trace_bert, text_lengths, _sentence, _text_shapes,
        {"input_ids": {1: "seq"}, "attention_mask": {1: "seq"}}, 32, 2000),
    "recsys": Workload(
        "recsys", "dcn_v2 scripted, batch sizes 1…512 from a dynamic batcher",
        ZOO["dcn_v2"].eager, _script, batch_sizes, ZOO["dcn_v2"].make_inputs, _recsys_shapes,
        {"dense": {0: "batch"}, "sparse": {0: "batch"}}, 16, 2000),
    "conv": Workload(
        "conv", "resnet_tiny scripted, 32/48/64/96 px square at batch 1/2/4",
        ZOO["resnet_tiny"].eager, _script, image_sizes,
        lambda size, g: (torch.randn(size[0], 3, size[1], size[1], generator=g),),
        _conv_shapes, {"x": {0: "batch", 2: "side", 3: "side"}}, (2, 48), 600),
}
