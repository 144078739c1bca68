"""Named models and data for configs: the target digits, and ``safedlora.micro-vit-pretrained``, an alias of the
core's ``micro-vit-pretrained`` (the micro ViT 'pre-trained' by fedcore on a disjoint source task, digits 0-4)."""
from __future__ import annotations

from typing import Any


def pretrained_micro_vit(*, head_seed: int = 0, **kwargs: Any):
    """Alias of the core's ``micro-vit-pretrained`` (timm micro ViT pre-trained by fedcore on digits 0-4, fresh head
    for digits 5-9), kept so configs naming ``safedlora.micro-vit-pretrained`` still run. In a config the head is
    seeded from the run's ``seed`` unless ``head_seed`` is given."""
    from fedcore.models import micro_vit_pretrained

    return micro_vit_pretrained(head_seed=head_seed, **kwargs)


def target_digits(**kwargs: Any):
    """The target task: scikit-learn digits 5-9 relabelled 0-4, (train, test)."""
    from fedcore.data import load_digits

    kwargs.setdefault("classes", (5, 6, 7, 8, 9))
    args: dict[str, Any] = {k: tuple(v) if k == "classes" else v for k, v in kwargs.items()}
    return load_digits(**args)
