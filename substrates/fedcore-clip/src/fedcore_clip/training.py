"""CoOp training of a prompt (plain torch; used by local updates, fine-tuning baselines and PVI scoring).

SGD with momentum and weight decay (Dassl defaults, as in the PromptFL code), an optional constant
warm-up, then a cosine schedule over the local epochs restarted every call (spec 003b A26). The loss is
cross-entropy over the global label space on ``exp(t)·cos`` logits, plus FedProx's ``(mu/2)·||P − P_0||²``
when ``mu`` is given. Image features come from the cache unless ``encode`` is given (augmentation).
"""
from __future__ import annotations

import math
from collections.abc import Callable

import torch
from torch import nn

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
    named = trainable_parameters(model)
    params = [p for _, p in named]
    if not params:
        raise ValueError("the prompt has no trainable parameters")
    opt = torch.optim.SGD(params, lr=lr, momentum=momentum, weight_decay=weight_decay)
    anchor = [p.detach().clone() for p in params] if mu is not None else None
    n = len(labels)
    steps_per_epoch = max(1, math.ceil(n / batch_size))
    total = epochs * steps_per_epoch
    warm = warmup_epochs * steps_per_epoch
    loss_sum, seen, step = 0.0, 0, 0
    scale = model.backbone.logit_scale()
    for _ in range(epochs):
        order = torch.randperm(n, generator=generator)
        for s in range(0, n, batch_size):
            pos = order[s:s + batch_size]
            if step < warm:
                cur = warmup_lr
            elif schedule == "cosine":
                cur = 0.5 * lr * (1 + math.cos(math.pi * (step - warm) / max(1, total - warm)))
            else:
                cur = lr
            for group in opt.param_groups:
                group["lr"] = cur
            feats = features[pos] if encode is None else encode(pos)
            logits = scale * feats @ model.text_features().t()
            loss = nn.functional.cross_entropy(logits, labels[pos])
            total_loss = loss
            if anchor is not None:
                total_loss = loss + 0.5 * float(mu) * sum(((p - a) ** 2).sum() for p, a in zip(params, anchor))
            opt.zero_grad(set_to_none=True)
            total_loss.backward()
            opt.step()
            loss_sum += float(loss.detach()) * len(pos)
            seen += len(pos)
            step += 1
    return loss_sum / max(seen, 1)
