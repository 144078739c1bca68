"""In-memory tensor datasets and the batch iterator local updates use.

Tensor-backed data is indexed directly instead of going through a DataLoader: on micro models the
loader's per-sample overhead would cost more than the training step.
"""
from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np
import torch


class ArrayDataset(torch.utils.data.Dataset):
    """Inputs ``x`` and integer labels ``y`` held as tensors, with optional class names."""

    def __init__(self, x: torch.Tensor, y: torch.Tensor, classes: Sequence[str] | None = None) -> None:
        if len(x) != len(y):
            raise ValueError(f"x has {len(x)} samples but y has {len(y)}")
        self.x = x
        self.y = y.long()
        if classes is None:  # read the labels only when needed (no device sync for data placed on a GPU)
            classes = [str(i) for i in range(int(self.y.max()) + 1 if len(y) else 0)]
        self.classes = list(classes)

    def __len__(self) -> int:
        return len(self.y)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        return self.x[i], self.y[i]

    @property
    def targets(self) -> torch.Tensor:
        return self.y

    @property
    def num_classes(self) -> int:
        return len(self.classes)

    def subset(self, indices: Sequence[int]) -> ArrayDataset:
        idx = torch.as_tensor(list(indices), dtype=torch.long)
        return ArrayDataset(self.x[idx], self.y[idx], self.classes)


def labels_of(dataset: Any) -> np.ndarray:
    """Integer labels of any dataset: ``.targets``/``.y`` when present, else by iterating it."""
    for attr in ("targets", "y", "labels"):
        value = getattr(dataset, attr, None)
        if value is not None:
            return np.asarray(value.cpu() if isinstance(value, torch.Tensor) else value, dtype=np.int64)
    return np.asarray([int(dataset[i][1]) for i in range(len(dataset))], dtype=np.int64)


def batches(dataset: Any, indices: Sequence[int], batch_size: int, *, generator: torch.Generator | None = None,
            shuffle: bool = True) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """Minibatches ``(x, y)`` over ``indices``, shuffled with ``generator`` when asked."""
    idx = torch.as_tensor(list(indices), dtype=torch.long)
    if shuffle:
        idx = idx[torch.randperm(len(idx), generator=generator)]
    direct = isinstance(dataset, ArrayDataset)
    if direct and dataset.x.device != idx.device:  # data placed on an accelerator: index it there
        idx = idx.to(dataset.x.device)
    for start in range(0, len(idx), batch_size):
        chunk = idx[start:start + batch_size]
        if direct:
            yield dataset.x[chunk], dataset.y[chunk]
        else:
            items = [dataset[int(i)] for i in chunk]
            yield torch.stack([torch.as_tensor(x) for x, _ in items]), torch.as_tensor([int(y) for _, y in items])
