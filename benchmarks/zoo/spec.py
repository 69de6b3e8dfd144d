"""``ZooModel``: one zoo entry — how to build it, how its users compile it, its inputs."""

from __future__ import annotations

import warnings
from collections.abc import Callable
from dataclasses import dataclass, field

import torch

#: How a model is turned into TorchScript: ``torch.jit.script`` (models with control flow,
#: hand-written modules) or ``torch.jit.trace`` on batch-1 example inputs (Hugging Face models).
SCRIPT, TRACE = "script", "trace"


@dataclass(frozen=True)
class ZooModel:
    """One model of the zoo.

    ``build()`` makes the ``nn.Module`` (random weights; ``eager()`` seeds it), ``make_inputs
    (batch, generator)`` the positional inputs, ``compile`` is ``"script"`` or ``"trace"``:
    the way this kind of model is turned into TorchScript by the people who use it.
    """

    name: str
    family: str
    description: str
    batches: tuple[int, ...]
    build: Callable[[], torch.nn.Module] = field(repr=False)
    make_inputs: Callable[[int, torch.Generator], tuple] = field(repr=False)
    compile: str = SCRIPT
    seed: int = 0

    def __post_init__(self):
        if self.compile not in (SCRIPT, TRACE):
            raise ValueError(f"{self.name}: compile must be {SCRIPT!r} or {TRACE!r}, "
                             f"got {self.compile!r}")
        if len(self.batches) != 2 or self.batches[0] != 1 or self.batches[1] <= 1:
            raise ValueError(f"{self.name}: batches must be (1, B) with B > 1, "
                             f"got {self.batches}")

    def eager(self) -> torch.nn.Module:
        """A fresh instance in eval mode, its weights drawn from ``self.seed`` (the global
        random state of the caller is left as it was)."""
        with torch.random.fork_rng():
            torch.manual_seed(self.seed)
            return self.build().eval()

    def scripted(self) -> torch.jit.ScriptModule:
        """A fresh TorchScript module (not frozen) in eval mode: ``torch.jit.script`` of
        ``eager()``, or ``torch.jit.trace`` of it on ``inputs(1)`` with ``strict=False`` (the
        Hugging Face models that return a dict need it)."""
        model = self.eager()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            if self.compile == SCRIPT:
                module = torch.jit.script(model)
            else:
                module = torch.jit.trace(model, self.inputs(1), check_trace=False,
                                         strict=False)
        return module.eval()

    def inputs(self, batch: int, seed: int = 0) -> tuple:
        """Positional example inputs for ``batch`` samples, drawn from ``seed``."""
        if batch < 1:
            raise ValueError(f"{self.name}: batch must be ≥ 1, got {batch}")
        return tuple(self.make_inputs(batch, torch.Generator().manual_seed(seed)))


def hf_config(config_class: type, **kwargs):
    """A Hugging Face config for tracing, as HF's TorchScript guide sets it up:
    ``torchscript=True`` (untied weights); ``return_dict=False`` unless given, which
    transformers 5 needs for tuple outputs (models traced with it return tuples, the others
    dicts: ``scripted()`` traces with ``strict=False``)."""
    kwargs.setdefault("return_dict", False)
    return config_class(torchscript=True, **kwargs)


def token_ids(generator: torch.Generator, batch: int, length: int, vocab: int) -> torch.Tensor:
    return torch.randint(0, vocab, (batch, length), generator=generator)


def padding_mask(generator: torch.Generator, batch: int, length: int) -> torch.Tensor:
    """An attention mask of ones followed by zeros (right padding); row 0 is unpadded and the
    others keep at least half of ``length``."""
    keep = torch.randint(length // 2, length + 1, (batch,), generator=generator)
    keep[0] = length
    return (torch.arange(length)[None, :] < keep[:, None]).long()
