"""Pointwise V-information of candidate samples under a frozen CLIP + CoOp prompt (thesis Eq. 6.4-6.7).

``PVI(x→y) = −log2 g[∅, p](y) + log2 g[x, p'](y)`` where p' is a prompt trained with the inputs and p a
prompt trained on the null input ∅ (spec 003b §3.3): both start from a fresh N(0, 0.02²) context and are
trained for ``epochs`` with CoOp's loop on the client's candidate pool. The null input is the all-zeros
image *after* CLIP normalisation (the dataset-mean image); ``null_mode="label_marginal"`` uses the
pool's label frequencies instead (the unrestricted optimum of Eq. 6.4). PVI is in bits and in-sample.
"""
from __future__ import annotations

import math
from typing import Any

import torch
from torch.nn import functional as F

from fedcore_clip import PromptedCLIP, train_prompt

NULL_MODES = ("null_image", "label_marginal")


def fresh_prompt(model: PromptedCLIP, generator: torch.Generator, std: float = 0.02) -> PromptedCLIP:
    """A copy of ``model`` whose trainable context is re-drawn from N(0, std²)."""
    own = model.working_copy()
    with torch.no_grad():
        for p in own.parameters():
            if p.requires_grad:
                p.copy_(torch.randn(p.shape, generator=generator) * std)
    return own


@torch.no_grad()
def null_feature(model: PromptedCLIP) -> torch.Tensor:
    """The normalised image feature of the null input (zeros after normalisation)."""
    size = model.backbone.prep.image_size
    null = torch.zeros(1, 3, size, size, device=model.backbone.prep.mean.device)  # the model's device
    return F.normalize(model.backbone.model.encode_image(null), dim=-1)[0]


def log2_probs(model: PromptedCLIP, features: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        logits = model.logits_from_features(features)
        return torch.log_softmax(logits, dim=-1).gather(1, labels[:, None])[:, 0] / math.log(2)


def pvi_scores(model: PromptedCLIP, features: torch.Tensor, labels: torch.Tensor, *, epochs: int, lr: float,
               batch_size: int, generator: torch.Generator, null_mode: str = "null_image",
               momentum: float = 0.9, weight_decay: float = 5e-4) -> dict[str, torch.Tensor]:
    """Per-sample PVI (bits) and its two terms, for normalised ``features [n, C]`` with ``labels [n]``."""
    if null_mode not in NULL_MODES:
        raise ValueError(f"null_mode={null_mode!r}; choose one of: {', '.join(NULL_MODES)}")
    kw: dict[str, Any] = dict(epochs=epochs, lr=lr, batch_size=batch_size, momentum=momentum,
                              weight_decay=weight_decay, generator=generator)
    with_x = fresh_prompt(model, generator)
    train_prompt(with_x, features, labels, **kw)
    conditional = log2_probs(with_x, features, labels)
    if null_mode == "null_image":
        null = null_feature(model).expand(len(labels), -1).contiguous()
        without_x = fresh_prompt(model, generator)
        train_prompt(without_x, null, labels, **kw)
        marginal = log2_probs(without_x, null, labels)
    else:
        counts = torch.bincount(labels, minlength=model.prompt.num_classes).double()
        marginal = (torch.log2(counts / counts.sum())[labels]).float()
    return {"pvi": conditional - marginal, "log2_p_x": conditional, "log2_p_null": marginal}
