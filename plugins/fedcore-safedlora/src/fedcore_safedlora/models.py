"""Named models for configs: the micro ViT 'pre-trained' by fedcore on a disjoint source task (digits 0-4)."""
from __future__ import annotations

from typing import Any


def pretrained_micro_vit(**kwargs: Any):
    """timm micro ViT pre-trained by fedcore on digits 0-4 (cached), with a fresh head for digits 5-9."""
    from fedcore.models import pretrained_for_target

    return pretrained_for_target("micro-vit", **kwargs)[0]


def target_digits(**kwargs: Any):
    """The target task: scikit-learn digits 5-9 relabelled 0-4, (train, test)."""
    from fedcore.data import load_digits

    kwargs.setdefault("classes", (5, 6, 7, 8, 9))
    args: dict[str, Any] = {k: tuple(v) if k == "classes" else v for k, v in kwargs.items()}
    return load_digits(**args)
