"""Micro backbones for CPU runs, built with timm (``pretrained=False``), and a tiny MLP for unit tests."""
from fedcore.models.micro import micro_cnn, micro_vit, tiny_mlp

__all__ = ["micro_cnn", "micro_vit", "tiny_mlp"]
