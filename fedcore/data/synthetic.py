"""A seeded synthetic classification set for unit tests: Gaussian class blobs shaped as images."""
from __future__ import annotations

import torch

from fedcore.data.arrays import ArrayDataset
from fedcore.rng import torch_generator


def synthetic_classification(*, n: int = 256, num_classes: int = 4, shape: tuple[int, ...] = (1, 8, 8),
                             noise: float = 0.5, seed: int = 0) -> ArrayDataset:
    """``n`` samples whose class means are random patterns; separable at ``noise`` around 0.5."""
    if n < num_classes:
        raise ValueError(f"n={n} must be at least num_classes={num_classes}")
    g = torch_generator(seed, "synthetic")
    means = torch.randn((num_classes, *shape), generator=g)
    y = torch.arange(n) % num_classes
    y = y[torch.randperm(n, generator=g)]
    x = means[y] + noise * torch.randn((n, *shape), generator=g)
    return ArrayDataset(x.float(), y, [f"class{i}" for i in range(num_classes)])
