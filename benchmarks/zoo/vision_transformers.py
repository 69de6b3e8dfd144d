"""Vision transformers from Hugging Face configs, traced on pixel values: ViT, and Swin
(shifted-window attention with relative position bias, patch merging)."""

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


def _swin() -> torch.nn.Module:
    import transformers

    return transformers.SwinModel(hf_config(
        transformers.SwinConfig, image_size=32, patch_size=2, num_channels=3, embed_dim=32,
        depths=[2, 2], num_heads=[2, 4], window_size=4, mlp_ratio=2.0,
        # transformers 5's SwinModel reads its encoder's output as a dict
        return_dict=True))


def _inputs(batch: int, g: torch.Generator) -> tuple:
    return (torch.randn(batch, 3, 32, 32, generator=g),)


MODELS = [
    ZooModel("hf_vit", FAMILY, "ViTModel, 32×32 images in 8×8 patches, 2 layers, hidden 96, "
             "pooler", (1, 8), _vit, _inputs, TRACE),
    ZooModel("hf_swin", FAMILY, "SwinModel, 32×32 images in 2×2 patches, 2 stages (2 blocks, "
             "embed 32, 2/4 heads), 4×4 windows shifted, patch merging, pooler", (1, 8), _swin,
             _inputs, TRACE),
]
