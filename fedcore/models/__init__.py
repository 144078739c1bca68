"""Models by name: any timm architecture (:func:`timm_model`, config name ``timm``; weights from the hub or a local
file read without running code), and micro backbones for CPU runs: a plain-torch CNN, a timm ViT (needs timm) and
a tiny MLP. :class:`LoRAConfig` is a config's ``[model.lora]``, which the model carries (:func:`attach_lora`,
:func:`model_lora`) to the components that inject the peft adapters (docs/models.md).

``pretrained_for_target`` gives a micro backbone pre-trained by fedcore itself on a disjoint source
task (cached on disk), with a fresh head for the target task (config name ``micro-vit-pretrained``:
:func:`micro_vit_pretrained`); ``cache_root``/``write_cached`` are the one
atomic cache any substrate that pre-trains its own backbone (fedcore-clip) writes through, and
``deterministic_build`` the block it trains in (one thread: the same weights from every process).
"""
from fedcore.models.lora import LoRAConfig, attach_lora, model_lora
from fedcore.models.micro import micro_cnn, micro_vit, tiny_mlp
from fedcore.models.pretrain import (
    cache_root,
    deterministic_build,
    micro_vit_pretrained,
    pretrained_for_target,
    write_cached,
)
from fedcore.models.timm_arch import timm_model

__all__ = ["LoRAConfig", "attach_lora", "cache_root", "deterministic_build", "micro_cnn", "micro_vit",
           "micro_vit_pretrained", "model_lora", "pretrained_for_target", "timm_model", "tiny_mlp", "write_cached"]
