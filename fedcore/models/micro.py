"""Micro models sized for 8x8 to 32x32 inputs on two CPU cores.

timm is imported inside the factories so that importing fedcore stays light; the ViT is timm's own
``VisionTransformer`` class (so split, LoRA and pruning plugins see the real block structure), the
CNN is made of timm's ``ConvNormAct`` blocks.
"""
from __future__ import annotations

from torch import nn


def micro_cnn(*, num_classes: int = 10, in_chans: int = 1, width: int = 32) -> nn.Module:
    """Two conv-BN-ReLU stages, global average pooling and a linear head (about 30k parameters at width 32)."""
    from timm.layers import ConvNormAct

    return nn.Sequential(
        ConvNormAct(in_chans, width, kernel_size=3, padding=1),
        ConvNormAct(width, width, kernel_size=3, padding=1),
        nn.MaxPool2d(2),
        ConvNormAct(width, 2 * width, kernel_size=3, padding=1),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(2 * width, num_classes),
    )


def micro_vit(*, num_classes: int = 10, in_chans: int = 1, img_size: int = 8, patch_size: int = 2,
              embed_dim: int = 64, depth: int = 4, num_heads: int = 4, mlp_ratio: float = 2.0,
              drop_path_rate: float = 0.0) -> nn.Module:
    """timm ``VisionTransformer`` of width 64 and depth 4 on 8x8 inputs by default (about 136k parameters)."""
    from timm.models.vision_transformer import VisionTransformer

    return VisionTransformer(img_size=img_size, patch_size=patch_size, in_chans=in_chans, num_classes=num_classes,
                             embed_dim=embed_dim, depth=depth, num_heads=num_heads, mlp_ratio=mlp_ratio,
                             drop_path_rate=drop_path_rate)


def tiny_mlp(*, num_classes: int = 4, in_features: int = 64, hidden: int = 32) -> nn.Module:
    """Flatten -> Linear -> ReLU -> Linear: the fastest model for contract checks."""
    return nn.Sequential(nn.Flatten(), nn.Linear(in_features, hidden), nn.ReLU(), nn.Linear(hidden, num_classes))
