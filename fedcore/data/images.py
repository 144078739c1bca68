"""Image datasets that stay compact: uint8 at their stored resolution, made into model inputs per batch.

:class:`ImageDataset` holds its images either as one uint8 tensor ``(n, c, h, w)`` (every image the same
size: CIFAR, MNIST, FEMNIST) or, when sizes differ (Caltech101, ImageNet folders), as the Arrow table they
came in (:class:`ArrowImages`, memory-mapped from the Hugging Face cache, decoded per batch). Its
:class:`~fedcore.data.transform.ImageTransform` runs in :meth:`ImageDataset.gather`, which
:func:`fedcore.data.batches` calls, so resized float inputs exist one batch at a time. The transform is
bound to the model after it is built (:meth:`ImageDataset.for_model`, called by the experiment runner).
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch
from torch import nn

from fedcore.data.arrays import ArrayDataset, checked_columns, subset_columns
from fedcore.data.transform import ImageTransform, TransformSettings
from fedcore.errors import ConfigError


def image_tensor(array: np.ndarray) -> torch.Tensor:
    """One decoded image (``h, w`` or ``h, w, c``) as a ``(c, h, w)`` tensor of its own dtype (a copy: PIL's
    arrays are read-only)."""
    t = torch.from_numpy(np.array(array))
    return t.unsqueeze(0) if t.ndim == 2 else t.permute(2, 0, 1)


class ArrowImages:
    """Images of different sizes left in their Arrow table (a ``datasets.Dataset``), decoded per batch."""

    def __init__(self, table: Any, column: str) -> None:
        self.table = table
        self.column = column

    def __len__(self) -> int:
        return len(self.table)

    def take(self, indices: Sequence[int]) -> list[torch.Tensor]:
        rows = self.table[[int(i) for i in indices]][self.column]
        return [image_tensor(np.asarray(im)) for im in rows]

    def select(self, indices: Sequence[int]) -> ArrowImages:
        return ArrowImages(self.table.select([int(i) for i in indices]), self.column)


class ImageDataset(torch.utils.data.Dataset):
    """Compact images, integer labels ``y``, class names, further ``columns``, and the transform that makes
    model inputs of them (see the module docstring).

    ``settings`` are the dataset's own transform settings; the transform in use is theirs alone until
    :meth:`for_model` binds the model's. Items and batches come out transformed, so anything written for an
    :class:`~fedcore.data.ArrayDataset` through ``dataset[i]``, :func:`~fedcore.data.batches` or
    :func:`~fedcore.data.gather` works unchanged.
    """

    def __init__(self, images: torch.Tensor | ArrowImages, y: torch.Tensor, classes: Sequence[str], *,
                 columns: Mapping[str, np.ndarray] | None = None, settings: TransformSettings | None = None,
                 transform: ImageTransform | None = None) -> None:
        if len(images) != len(y):
            raise ValueError(f"{len(images)} images but {len(y)} labels")
        self.images = images
        self.y = y.long()
        self.classes = list(classes)
        self.columns = checked_columns(columns, len(y))
        self.settings = settings or TransformSettings()
        self.transform = transform or self.settings.resolve(None)

    def __len__(self) -> int:
        return len(self.y)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        x, y = self.gather(torch.tensor([int(i)]))
        return x[0], y[0]

    @property
    def targets(self) -> torch.Tensor:
        return self.y

    @property
    def num_classes(self) -> int:
        return len(self.classes)

    @property
    def stored_bytes(self) -> int:
        """Bytes the images take in memory (0 when they stay in the Arrow table)."""
        return self.images.numel() * self.images.element_size() if isinstance(self.images, torch.Tensor) else 0

    def gather(self, indices: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Model inputs and labels of ``indices``: the stored images indexed, then transformed."""
        y = self.y[indices.to(self.y.device)]
        if isinstance(self.images, torch.Tensor):
            return self.transform(self.images[indices.to(self.images.device)]), y
        return self.transform(self.images.take(indices.tolist())).to(self.y.device), y

    def _with(self, **changes: Any) -> ImageDataset:
        parts: dict[str, Any] = dict(images=self.images, y=self.y, classes=self.classes, columns=self.columns,
                                     settings=self.settings, transform=self.transform)
        parts.update(changes)
        return ImageDataset(parts.pop("images"), parts.pop("y"), parts.pop("classes"), **parts)

    def for_model(self, model: nn.Module) -> ImageDataset:
        """The same images (shared, not copied) with the transform ``model`` asks for, under the dataset's
        overrides. Images of different sizes need a size from one of the two (else a one-line error)."""
        transform = self.settings.resolve(model)
        if isinstance(self.images, ArrowImages) and transform.size is None:
            raise ConfigError("the images differ in size and neither the dataset (size = ...) nor the model's "
                              "pretrained config gives one to bring them to")
        return self._with(transform=transform)

    def subset(self, indices: Sequence[int]) -> ImageDataset:
        idx = torch.as_tensor(list(indices), dtype=torch.long)
        images = self.images[idx.to(self.images.device)] if isinstance(self.images, torch.Tensor) \
            else self.images.select(idx.tolist())
        return self._with(images=images, y=self.y[idx.to(self.y.device)], columns=subset_columns(self.columns, idx))

    def to(self, device: torch.device | str) -> ImageDataset:
        """Stored images (still uint8) and labels on ``device``; Arrow-backed images stay on the host."""
        images = self.images.to(device) if isinstance(self.images, torch.Tensor) else self.images
        return self._with(images=images, y=self.y.to(device))

    def as_arrays(self) -> ArrayDataset:
        """Every image transformed, in one :class:`ArrayDataset` (small sets and tests only: this is the
        float copy the class otherwise avoids)."""
        x, y = self.gather(torch.arange(len(self)))
        return ArrayDataset(x, y, self.classes, columns=self.columns)


__all__ = ["ArrowImages", "ImageDataset", "image_tensor"]
