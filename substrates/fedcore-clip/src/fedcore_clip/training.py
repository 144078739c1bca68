"""CoOp training of a prompt (plain torch; used by local updates, fine-tuning baselines and PVI scoring).

The loop is :func:`fedcore.training.train_epochs`: SGD with momentum and weight decay (Dassl
defaults, as in the PromptFL code), an optional constant warm-up, then a cosine schedule over the
local epochs restarted every call (spec 003b A26). The loss is cross-entropy over the global label
space on ``exp(t)·cos`` logits, plus FedProx's ``(mu/2)·||P − P_0||²`` when ``mu`` is given. Image
features come from the cache unless ``encode`` is given (augmentation).
"""
from __future__ import annotations

from collections.abc import Callable
import math

import torch
from torch import nn

from fedcore.data import ArrayDataset
from fedcore.runtime import book_samples
from fedcore.training import train_epochs
from fedcore.types import ClientData
from fedcore_clip.learner import PromptedCLIP


def trainable_parameters(model: PromptedCLIP) -> list[tuple[str, nn.Parameter]]:
    return [(n, p) for n, p in model.named_parameters() if p.requires_grad]


def train_prompt(model: PromptedCLIP, features: torch.Tensor | None, labels: torch.Tensor, *, epochs: int, lr: float,
                 batch_size: int = 32, momentum: float = 0.9, weight_decay: float = 5e-4, schedule: str = "cosine",
                 warmup_epochs: int = 0, warmup_lr: float = 1e-5, generator: torch.Generator | None = None,
                 mu: float | None = None, encode: Callable[[torch.Tensor], torch.Tensor] | None = None) -> float:
    """Train the trainable parameters of ``model`` in place; returns the mean training loss.

    ``features[i]`` is the normalised image feature of sample ``i`` (or ``encode(positions)`` gives the
    features of a batch of positions, for augmented training). ``mu=None`` means no proximal term;
    ``mu=0.0`` computes the term with weight zero (PromptProx with mu = 0).
    """
    n = len(labels)
    steps_per_epoch = max(1, math.ceil(n / batch_size))
    total = epochs * steps_per_epoch
    warm = warmup_epochs * steps_per_epoch

    def lr_at(step: int) -> float:
        if step < warm:
            return warmup_lr
        if schedule == "cosine":
            return 0.5 * lr * (1 + math.cos(math.pi * (step - warm) / max(1, total - warm)))
        return lr

    scale = model.backbone.logit_scale()

    def loss(module: nn.Module, pos: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        feats = encode(pos) if encode is not None else features[pos]  # type: ignore[index]
        book_samples(model, len(y))  # the step runs the towers, not model.forward: the clock's work unit
        return nn.functional.cross_entropy(scale * feats @ model.text_features().t(), y)

    # the "dataset" is the sample positions, so batches shuffle positions exactly as a randperm would
    positions = ClientData(dataset=ArrayDataset(torch.arange(n), labels), indices=range(n))
    return train_epochs(model, positions, epochs=epochs, lr=lr, momentum=momentum, weight_decay=weight_decay,
                        batch_size=batch_size, mu=mu, generator=generator, loss=loss, lr_at=lr_at)
