"""Micro models sized for 8x8 to 32x32 inputs on two CPU cores.

The ViT is timm's own ``VisionTransformer`` class (so split, LoRA and pruning plugins see the real block
structure); timm is an optional dependency (``pip install 'fedcore[vision]'``), imported when a ViT is
built. The CNN is plain torch, so the core's demo runs without timm: its blocks have the layout, the
state-dict keys (``conv``, ``bn``) and the numbers of timm's ``ConvNormAct``.
"""
from __future__ import annotations

from types import ModuleType

import torch
from torch import nn

from fedcore.errors import ConfigError


class ConvNormAct(nn.Module):
    """Conv (no bias) -> BatchNorm -> ReLU, as timm's ``ConvNormAct`` with its defaults."""

    def __init__(self, in_chans: int, out_chans: int, kernel_size: int = 3, padding: int = 1) -> None:
        super().__init__()
        self.conv = nn.Conv2d(in_chans, out_chans, kernel_size, padding=padding, bias=False)
        self.bn = nn.BatchNorm2d(out_chans)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.bn(self.conv(x)))


def micro_cnn(*, num_classes: int = 10, in_chans: int = 1, width: int = 32) -> nn.Module:
    """Two conv-BN-ReLU stages, global average pooling and a linear head (about 30k parameters at width 32)."""
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
    VisionTransformer = timm_module("timm.models.vision_transformer", "the micro ViT").VisionTransformer
    return VisionTransformer(img_size=img_size, patch_size=patch_size, in_chans=in_chans, num_classes=num_classes,
                             embed_dim=embed_dim, depth=depth, num_heads=num_heads, mlp_ratio=mlp_ratio,
                             drop_path_rate=drop_path_rate)


def timm_module(name: str, what: str) -> ModuleType:
    """Import the timm module ``name``; without timm, one ConfigError line saying what to install."""
    import importlib

    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as exc:
        if exc.name != "timm":
            raise
        raise ConfigError(f"{what} is built with timm, which is not installed: "
                          "pip install 'fedcore[vision]' (or pip install timm)") from None


def tiny_mlp(*, num_classes: int = 4, in_features: int = 64, hidden: int = 32) -> nn.Module:
    """Flatten -> Linear -> ReLU -> Linear: the fastest model for contract checks."""
    return nn.Sequential(nn.Flatten(), nn.Linear(in_features, hidden), nn.ReLU(), nn.Linear(hidden, num_classes))
