"""A vision transformer: Hugging Face ViT from a config, traced on pixel values."""

from __future__ import annotations

import torch

from .spec import TRACE, ZooModel, hf_config

FAMILY = "vision transformer"


def _vit() -> torch.nn.Module:
    import transformers

    return transformers.ViTModel(hf_config(
        transformers.ViTConfig, image_size=32, patch_size=8, num_channels=3, hidden_size=96,
        num_hidden_layers=2, num_attention_heads=3, intermediate_size=192),
        add_pooling_layer=True)


def _inputs(batch: int, g: torch.Generator) -> tuple:
    return (torch.randn(batch, 3, 32, 32, generator=g),)


MODELS = [
    ZooModel("hf_vit", FAMILY, "ViTModel, 32×32 images in 8×8 patches, 2 layers, hidden 96, "
             "pooler", (1, 8), _vit, _inputs, TRACE),
]
