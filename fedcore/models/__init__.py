"""Micro backbones for CPU runs: a plain-torch CNN, a timm ViT (``pretrained=False``; needs timm) and a tiny MLP.

``pretrained_for_target`` gives a micro backbone pre-trained by fedcore itself on a disjoint source
task (cached on disk), with a fresh head for the target task (config name ``micro-vit-pretrained``:
:func:`micro_vit_pretrained`); ``cache_root``/``write_cached`` are the one
atomic cache any substrate that pre-trains its own backbone (fedcore-clip) writes through, and
``deterministic_build`` the block it trains in (one thread: the same weights from every process).
"""
from fedcore.models.micro import micro_cnn, micro_vit, tiny_mlp
from fedcore.models.pretrain import (cache_root, deterministic_build, micro_vit_pretrained, pretrained_for_target,
                                     write_cached)

__all__ = ["cache_root", "deterministic_build", "micro_cnn", "micro_vit", "micro_vit_pretrained", "pretrained_for_target", "tiny_mlp",
           "write_cached"]
