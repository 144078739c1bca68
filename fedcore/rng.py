"""Deterministic random streams.

Every random choice in a run draws from a stream derived from ``(seed, round, client, purpose)``,
so the same seed gives the same history whatever the executor, the number of workers or the order
in which clients happen to run.
"""
from __future__ import annotations

import hashlib

import numpy as np
import torch


def derive_seed(seed: int, *parts: object) -> int:
    """A 63-bit seed from ``seed`` and any hashable description of the purpose."""
    text = "/".join([str(int(seed))] + [str(p) for p in parts])
    return int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "little") >> 1


def torch_generator(seed: int, *parts: object) -> torch.Generator:
    g = torch.Generator()
    g.manual_seed(derive_seed(seed, *parts))
    return g


def numpy_generator(seed: int, *parts: object) -> np.random.Generator:
    return np.random.default_rng(derive_seed(seed, *parts))


__all__ = [
    "derive_seed", "numpy_generator", "torch_generator"
]
