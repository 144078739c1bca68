"""Micro backbones for CPU runs: a plain-torch CNN, a timm ViT (``pretrained=False``; needs timm) and a tiny MLP."""
from fedcore.models.micro import micro_cnn, micro_vit, tiny_mlp

__all__ = ["micro_cnn", "micro_vit", "tiny_mlp"]
