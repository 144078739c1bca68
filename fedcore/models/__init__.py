"""Micro backbones for CPU runs: a plain-torch CNN, a timm ViT (``pretrained=False``; needs timm) and a tiny MLP.

``pretrained_for_target`` gives a micro backbone pre-trained by fedcore itself on a disjoint source
task (cached on disk), with a fresh head for the target task (config name ``micro-vit-pretrained``:
:func:`micro_vit_pretrained`); ``cache_root``/``write_cached`` are the one
atomic cache any substrate that pre-trains its own backbone (fedcore-clip) writes through.
"""
from fedcore.models.micro import micro_cnn, micro_vit, tiny_mlp
from fedcore.models.pretrain import cache_root, micro_vit_pretrained, pretrained_for_target, write_cached

__all__ = ["cache_root", "micro_cnn", "micro_vit", "micro_vit_pretrained", "pretrained_for_target", "tiny_mlp",
           "write_cached"]
