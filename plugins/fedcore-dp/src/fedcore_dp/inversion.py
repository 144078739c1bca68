"""Why privacy: reconstruct a client's image from its whole-model update (DLG/iDLG), with and without DP.

A client holding one image takes one SGD step and uploads the change ``Δ = -lr·∇L(x, y)`` (FedSGD on one
sample, the setting of Zhu et al., NeurIPS 2019). A server that knows the model and the learning rate recovers

* the label from the sign of the last layer's bias gradient (iDLG, Zhao et al., 2020: with softmax and
  cross-entropy only the true class has a negative entry), then
* the image by optimising a dummy input until its gradient points the way of the observed one (cosine
  distance, as Geiping et al., NeurIPS 2020: insensitive to the clipping's rescaling).

:func:`release` is what DP-FedAvg lets out for a cohort of one: the change clipped to ``C`` plus
``N(0, (z·C)²)`` noise. :func:`inversion_check` attacks the plain and the released update and scores the
reconstructions (MSE and PSNR on [0, 1] pixels), next to a guess that saw nothing (the mean training image).
"""
from __future__ import annotations

from collections.abc import Sequence
import copy
import math
from typing import Any

import torch
from torch import nn

from fedcore_dp.clipping import clip, gaussian_like


def sgd_update(model: nn.Module, x: torch.Tensor, y: torch.Tensor, lr: float) -> dict[str, torch.Tensor]:
    """The change one SGD step on ``(x, y)`` makes to every parameter: ``-lr · ∇``."""
    params = dict(model.named_parameters())
    loss = nn.functional.cross_entropy(model(x), y)
    grads = torch.autograd.grad(loss, list(params.values()))
    return {k: -lr * g.detach() for k, g in zip(params, grads)}


def release(update: dict[str, torch.Tensor], clip_norm: float, noise_multiplier: float,
            generator: torch.Generator) -> dict[str, torch.Tensor]:
    """DP-FedAvg's output for a cohort of one: ``clip(Δ, C) + N(0, (z·C)²)``."""
    clipped, _, _ = clip(update, clip_norm)
    noise = gaussian_like(clipped, noise_multiplier * clip_norm, generator)
    return {k: (clipped[k] + noise[k]).float() for k in clipped}


def infer_label(update: dict[str, torch.Tensor], bias: str) -> int:
    """iDLG: the class whose last-layer bias gradient is negative (its change ``-lr·∇`` is the largest)."""
    return int(update[bias].argmax())


def invert(model: nn.Module, update: dict[str, torch.Tensor], *, shape: Sequence[int], bias: str, steps: int = 300,
           lr: float = 0.1, seed: int = 0) -> tuple[torch.Tensor, int]:
    """The image (in [0, 1]) and label a server reconstructs from the update ``Δ`` (cosine gradient matching)."""
    model = copy.deepcopy(model)
    params = dict(model.named_parameters())
    names = [k for k in params if k in update]
    target = torch.cat([-update[k].reshape(-1) for k in names])  # proportional to the gradient
    label = infer_label(update, bias)
    gen = torch.Generator().manual_seed(seed)
    dummy = torch.rand((1, *shape), generator=gen).requires_grad_(True)
    opt = torch.optim.Adam([dummy], lr=lr)
    y = torch.tensor([label])
    for _ in range(steps):
        opt.zero_grad()
        loss = nn.functional.cross_entropy(model(dummy.clamp(0, 1)), y)
        grads = torch.autograd.grad(loss, [params[k] for k in names], create_graph=True)
        flat = torch.cat([g.reshape(-1) for g in grads])
        distance = 1 - nn.functional.cosine_similarity(flat, target, dim=0)
        distance.backward()
        opt.step()
    return dummy.detach().clamp(0, 1), label


def scores(x_hat: torch.Tensor, x: torch.Tensor) -> dict[str, float]:
    err = float(((x_hat - x) ** 2).mean())
    return {"mse": err, "psnr": 10 * math.log10(1.0 / max(err, 1e-10))}


def inversion_check(model: nn.Module, x: torch.Tensor, y: torch.Tensor, *, public_mean: torch.Tensor,
                    client_lr: float = 0.1, clip_norm: float = 1.0, noise_multipliers: Sequence[float] = (0.0, 1.0),
                    steps: int = 300, seed: int = 0) -> list[dict[str, Any]]:
    """One row per attacked update: ``plain``, then ``dp`` at each noise multiplier (``z = 0``: clipping only)."""
    bias = [k for k, _ in model.named_parameters()][-1]
    update = sgd_update(model, x, y, client_lr)
    cases: list[tuple[str, float | None, dict[str, torch.Tensor]]] = [("plain", None, update)]
    for noise in noise_multipliers:
        gen = torch.Generator().manual_seed(seed + 1)
        cases.append(("dp", noise, release(update, clip_norm, noise, gen)))
    rows = []
    for name, z, seen in cases:
        x_hat, label = invert(model, seen, shape=tuple(x.shape[1:]), bias=bias, steps=steps, seed=seed)
        rows.append({"update": name, "noise_multiplier": z, "clip": None if z is None else clip_norm,
                     "label_correct": label == int(y[0]), **scores(x_hat, x)})
    rows.append({"update": "no attack (public mean image)", "noise_multiplier": None, "clip": None,
                 "label_correct": None, **scores(public_mean.reshape(x.shape), x)})
    return rows


__all__ = ["infer_label", "invert", "inversion_check", "release", "scores", "sgd_update"]
