"""In-memory tensor datasets and the batch iterator local updates use.

Tensor-backed data is indexed directly instead of going through a DataLoader: on micro models the
loader's per-sample overhead would cost more than the training step. A dataset that keeps its inputs
in another form (compact uint8 images turned into model inputs per batch: :class:`fedcore.data.ImageDataset`)
says so with a ``gather(indices) -> (x, y)`` method, which :func:`batches` and :func:`gather` call.
"""
from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import numpy as np
import torch

from fedcore.errors import ConfigError


class ArrayDataset(torch.utils.data.Dataset):
    """Inputs ``x`` and integer labels ``y`` held as tensors, with optional class names.

    ``columns`` are further per-sample values a partitioner may ask for by name (a writer or user id for
    ``natural-id``), one array each, indexed like ``y``.
    """

    def __init__(self, x: torch.Tensor, y: torch.Tensor, classes: Sequence[str] | None = None, *,
                 columns: Mapping[str, np.ndarray] | None = None) -> None:
        if len(x) != len(y):
            raise ValueError(f"x has {len(x)} samples but y has {len(y)}")
        self.x = canonical_layout(x)
        self.y = y.long()
        if classes is None:  # read the labels only when needed (no device sync for data placed on a GPU)
            classes = [str(i) for i in range(int(self.y.max()) + 1 if len(y) else 0)]
        self.classes = list(classes)
        self.columns = checked_columns(columns, len(y))

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

    def gather(self, indices: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Inputs and labels of ``indices`` as one batch."""
        idx = indices.to(self.x.device)
        return self.x[idx], self.y[idx]

    def subset(self, indices: Sequence[int]) -> ArrayDataset:
        idx = torch.as_tensor(list(indices), dtype=torch.long)
        return ArrayDataset(self.x[idx], self.y[idx], self.classes, columns=subset_columns(self.columns, idx))


def canonical_layout(x: torch.Tensor) -> torch.Tensor:
    """``x`` laid out row-major with the strides a fresh tensor of its shape has.

    A size-1 dimension's stride is arbitrary, yet torch reads it: an (N, 1, H, W) tensor whose channel stride is 1
    counts as channels-last, and a convolution then takes another kernel with other rounding. The same values
    reached by two routes (a split built with numpy's fancy indexing, the same arrays read back from a cache) would
    train to different numbers. Contiguous data gets a view with the canonical strides (no copy).
    """
    if not x.is_contiguous():
        x = x.contiguous()
    strides, step = [], 1
    for size in reversed(x.shape):
        strides.append(step)
        step *= max(size, 1)
    canonical = tuple(reversed(strides))
    return x if x.stride() == canonical else x.as_strided(x.shape, canonical, x.storage_offset())


def checked_columns(columns: Mapping[str, np.ndarray] | None, n: int) -> dict[str, np.ndarray]:
    out = {name: np.asarray(values) for name, values in (columns or {}).items()}
    wrong = {name: len(v) for name, v in out.items() if len(v) != n}
    if wrong:
        raise ValueError(f"columns {wrong} do not have one value per sample ({n})")
    return out


def subset_columns(columns: Mapping[str, np.ndarray], idx: torch.Tensor) -> dict[str, np.ndarray]:
    rows = idx.cpu().numpy()
    return {name: values[rows] for name, values in columns.items()}


def labels_of(dataset: Any) -> np.ndarray:
    """Integer labels of any dataset: ``.targets``/``.y`` when present, else by iterating it."""
    for attr in ("targets", "y", "labels"):
        value = getattr(dataset, attr, None)
        if value is not None:
            return np.asarray(value.cpu() if isinstance(value, torch.Tensor) else value, dtype=np.int64)
    return np.asarray([int(dataset[i][1]) for i in range(len(dataset))], dtype=np.int64)


def column_of(dataset: Any, name: str, *, who: str) -> np.ndarray:
    """The per-sample values of column ``name`` (``dataset.columns``); ``who`` asked (named in the error)."""
    columns = getattr(dataset, "columns", None) or {}
    if name not in columns:
        have = ", ".join(sorted(columns)) or "none"
        raise ConfigError(f"{who}: the training set has no column {name!r}; its columns: {have} (the hf dataset "
                          f"keeps every column of numbers or strings)")
    return np.asarray(columns[name])


def gather(dataset: Any, indices: Sequence[int] | torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Inputs and labels of ``indices`` as one batch: the dataset's own ``gather`` when it has one (an
    :class:`ArrayDataset` indexes its tensors, an image dataset decodes and transforms the batch), else its
    items stacked."""
    idx = torch.as_tensor(indices, dtype=torch.long)
    method = getattr(dataset, "gather", None)
    if method is not None:
        return method(idx)
    items = [dataset[int(i)] for i in idx]
    return torch.stack([torch.as_tensor(x) for x, _ in items]), torch.as_tensor([int(y) for _, y in items])


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
            yield gather(dataset, chunk)
