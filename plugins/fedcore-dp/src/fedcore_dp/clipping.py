"""The arithmetic of DP-FedAvg on tensor dicts: L2 norm, clipping, Gaussian noise (McMahan et al., 2018, Alg. 1).

A client's update is one vector: every floating entry it uploads (weights and float buffers alike: BatchNorm
statistics come from the client's data too). All sums run in float64; results are cast back to each entry's
dtype. Noise is drawn entry by entry in name order from the generator given, so a seed fixes it.
"""
from __future__ import annotations

from collections.abc import Mapping
import math

import torch

Tensors = Mapping[str, torch.Tensor]


def l2_norm(tensors: Tensors) -> float:
    """The L2 norm of all floating entries taken as one vector."""
    return math.sqrt(sum(float(v.double().pow(2).sum()) for v in tensors.values() if v.is_floating_point()))


def clip(delta: Tensors, clip_norm: float) -> tuple[dict[str, torch.Tensor], float, float]:
    """``delta`` scaled by ``min(1, C / ||delta||)``: ``(clipped, norm, scale)``. Non-floating entries are dropped."""
    norm = l2_norm(delta)
    scale = 1.0 if norm <= clip_norm else clip_norm / norm
    return {k: v.double() * scale for k, v in delta.items() if v.is_floating_point()}, norm, scale


def gaussian_like(tensors: Tensors, std: float, generator: torch.Generator) -> dict[str, torch.Tensor]:
    """Independent N(0, std²) noise shaped like every floating entry of ``tensors`` (float64, name order), on each
    entry's device. Drawn on the generator's device (the CPU's), then moved: the same seed gives the same noise
    wherever the model trains."""
    return {k: (torch.randn(tensors[k].shape, generator=generator, dtype=torch.float64) * std).to(tensors[k].device)
            for k in sorted(tensors) if tensors[k].is_floating_point()}


def add(a: Tensors, b: Tensors) -> dict[str, torch.Tensor]:
    """Entry-wise ``a + b`` in float64 over ``a``'s entries (an entry missing from ``b`` counts as zero)."""
    return {k: v.double() + b[k].double() if k in b else v.double() for k, v in a.items()}


def adaptive_noise_multiplier(z: float, bit_noise: float) -> float:
    """Andrew et al. (2021), Thm. 1: the update's noise multiplier ``(z⁻² - (2σ_b)⁻²)^(-1/2)`` that, released with
    the clipped-fraction count noised by ``σ_b``, makes the pair a Gaussian mechanism of multiplier ``z``."""
    if z <= 0:
        return 0.0
    rest = z ** -2 - (2.0 * bit_noise) ** -2
    if rest <= 0:
        raise ValueError(f"bit_noise={bit_noise} is too small for noise_multiplier={z}: need 2·bit_noise > z")
    return rest ** -0.5


def next_clip(clip_norm: float, unclipped_fraction: float, *, target_quantile: float, lr: float) -> float:
    """Andrew et al. (2021), geometric update: ``C · exp(-η (b̄ - γ))`` with ``b̄`` the (noised) unclipped fraction."""
    return clip_norm * math.exp(-lr * (unclipped_fraction - target_quantile))


__all__ = ["adaptive_noise_multiplier", "add", "clip", "gaussian_like", "l2_norm", "next_clip"]
