"""Updates as elements of the ring Z_R (R = 2^bits), as SecAgg needs: stochastic quantisation and back.

A value ``x`` is clipped to ``[-c, c]`` and mapped to an integer in ``[0, L]`` (``L = 2^quant_bits - 1``) by unbiased
stochastic rounding; the sum of ``n`` such integers is exact in Z_R while ``n·L < R``, and maps back to the sum of the
clipped values within ``n`` quantisation steps ``2c/L`` (unbiased). A ring element travels as a ``bits``-bit integer
tensor (int32 for 32 bits, the two's-complement view of the unsigned value): ``bits/8`` bytes on the ledger.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import torch

DTYPES = {16: (np.uint16, np.int16, torch.int16), 32: (np.uint32, np.int32, torch.int32)}


def quantise(values: np.ndarray, clip_range: float, quant_bits: int, rng: np.random.Generator) -> np.ndarray:
    """Integers in ``[0, 2^quant_bits - 1]`` (uint64) whose expectation maps back to ``clip(values, -c, c)``."""
    levels = float(2**quant_bits - 1)
    scaled = (np.clip(values, -clip_range, clip_range) + clip_range) / (2 * clip_range) * levels
    return np.minimum(np.floor(scaled + rng.random(values.shape)), levels).astype(np.uint64)


def dequantise_sum(total: np.ndarray, count: int, clip_range: float, quant_bits: int) -> np.ndarray:
    """The sum of ``count`` clipped values from the sum of their quantised integers (float64)."""
    step = 2 * clip_range / float(2**quant_bits - 1)
    return total.astype(np.float64) * step - count * clip_range


def step_size(clip_range: float, quant_bits: int) -> float:
    return 2 * clip_range / float(2**quant_bits - 1)


def flatten(tensors: Mapping[str, torch.Tensor], names: Sequence[str]) -> np.ndarray:
    """The entries ``names`` (in that order) as one float64 vector."""
    return np.concatenate([tensors[k].detach().double().reshape(-1).cpu().numpy() for k in names]) \
        if names else np.zeros(0)


def to_tensors(ring: np.ndarray, shapes: Mapping[str, torch.Size], names: Sequence[str], bits: int
               ) -> dict[str, torch.Tensor]:
    """A ring vector as ``bits``-bit integer tensors shaped like the entries."""
    unsigned, signed, _ = DTYPES[bits]
    out, at = {}, 0
    for k in names:
        size = int(np.prod(shapes[k])) if len(shapes[k]) else 1
        chunk = ring[at:at + size].astype(unsigned).view(signed)
        out[k] = torch.from_numpy(chunk.copy()).reshape(shapes[k])
        at += size
    return out


def from_tensors(tensors: Mapping[str, torch.Tensor], names: Sequence[str], bits: int) -> np.ndarray:
    """The ring vector (uint64) carried by ``bits``-bit integer tensors."""
    unsigned, _, _ = DTYPES[bits]
    if not names:
        return np.zeros(0, dtype=np.uint64)
    return np.concatenate([tensors[k].reshape(-1).cpu().numpy().view(unsigned).astype(np.uint64) for k in names])


__all__ = ["DTYPES", "dequantise_sum", "flatten", "from_tensors", "quantise", "step_size", "to_tensors"]
