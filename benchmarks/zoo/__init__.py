"""The model zoo: models as people bring them, for finding where the runtime is slow or
wrong. Random weights from fixed seeds, nothing downloaded (Hugging Face models are built
from configs), small enough that the whole zoo builds in seconds and each model runs in a
few milliseconds at batch 1 on one thread. Each is turned into TorchScript the way its users
do it: Hugging Face models traced (``torchscript=True`` configs), models with control flow
and hand-written modules scripted.

    from benchmarks.zoo import ZOO
    m = ZOO["hf_bert"]
    module = m.scripted()                 # traced or scripted, eval mode
    out = module(*m.inputs(batch=8))      # m.batches == (1, 8)
    ref = m.eager()(*m.inputs(8))         # the nn.Module, fresh and seeded

The zoo is for finding what is slow, not a list to tune to: decide by schemas, dtypes and
shapes, never by a zoo model's names.
"""

from __future__ import annotations

from . import (
    audio,
    control_flow,
    convolutional,
    decoders,
    encoders,
    language_models,
    modern_convnets,
    recommendation,
    recurrent,
    seq2seq,
    time_series,
    vision_transformers,
)
from .spec import SCRIPT, TRACE, ZooModel

__all__ = ["SCRIPT", "TRACE", "ZOO", "ZooModel"]

_FAMILIES = (encoders, decoders, language_models, seq2seq, vision_transformers, recurrent,
             time_series, recommendation, convolutional, modern_convnets, audio, control_flow)

ZOO: dict[str, ZooModel] = {}
for _family in _FAMILIES:
    for _model in _family.MODELS:
        if _model.name in ZOO:
            raise ValueError(f"two zoo models named {_model.name!r}")
        ZOO[_model.name] = _model
