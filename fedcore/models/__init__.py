"""Micro backbones for CPU runs: a plain-torch CNN, a timm ViT (``pretrained=False``; needs timm) and a tiny MLP.

``pretrained_for_target`` gives a micro backbone pre-trained by fedcore itself on a disjoint source
task (cached on disk), with a fresh head for the target task.
"""
from fedcore.models.micro import micro_cnn, micro_vit, tiny_mlp
from fedcore.models.pretrain import pretrained_for_target

__all__ = ["micro_cnn", "micro_vit", "pretrained_for_target", "tiny_mlp"]
