"""Loaders for real datasets on disk: image folders, CIFAR-10/100 python batches, Hugging Face ``save_to_disk``.

Nothing is downloaded: these read what a user already has. Each returns an :class:`ArrayDataset`.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from fedcore.data.arrays import ArrayDataset


def load_image_folder(root: str | Path, *, size: int | None = None, grayscale: bool = False) -> ArrayDataset:
    """A torchvision ``ImageFolder`` tree (``root/<class>/<image>``) as tensors in [0, 1]."""
    from torchvision import datasets, transforms

    root = Path(root)
    if not root.is_dir():
        raise FileNotFoundError(f"image folder {root} does not exist")
    steps = []
    if grayscale:
        steps.append(transforms.Grayscale())
    if size is not None:
        steps += [transforms.Resize(size), transforms.CenterCrop(size)]
    steps.append(transforms.ToTensor())
    folder = datasets.ImageFolder(str(root), transform=transforms.Compose(steps))
    xs, ys = zip(*[folder[i] for i in range(len(folder))]) if len(folder) else ((), ())
    if not xs:
        raise ValueError(f"image folder {root} holds no images")
    return ArrayDataset(torch.stack(xs), torch.as_tensor(ys), folder.classes)


def load_cifar(root: str | Path, *, train: bool = True, hundred: bool = False) -> ArrayDataset:
    """CIFAR-10/100 from the official python batches already extracted under ``root``."""
    from torchvision import datasets

    cls = datasets.CIFAR100 if hundred else datasets.CIFAR10
    ds = cls(str(root), train=train, download=False)
    x = torch.from_numpy(np.asarray(ds.data)).permute(0, 3, 1, 2).float() / 255.0
    return ArrayDataset(x, torch.as_tensor(ds.targets), ds.classes)


def load_hf_disk(path: str | Path, *, split: str = "train", image_key: str = "image", label_key: str = "label") -> ArrayDataset:
    """A Hugging Face dataset saved with ``save_to_disk`` (a ``Dataset`` or a ``DatasetDict``)."""
    from datasets import DatasetDict, load_from_disk

    ds = load_from_disk(str(path))
    if isinstance(ds, DatasetDict):
        if split not in ds:
            raise KeyError(f"split {split!r} not in {path}; available: {sorted(ds)}")
        ds = ds[split]
    for key in (image_key, label_key):
        if key not in ds.column_names:
            raise KeyError(f"column {key!r} not in {path}; columns: {ds.column_names}")
    images = []
    for item in ds[image_key]:
        arr = np.asarray(item, dtype=np.float32)
        if arr.max() > 1.0:
            arr = arr / 255.0
        images.append(torch.from_numpy(arr if arr.ndim == 3 else arr[None]))
    x = torch.stack(images)
    if x.shape[-1] in (1, 3) and x.shape[1] not in (1, 3):  # HWC -> CHW
        x = x.permute(0, 3, 1, 2)
    feature = ds.features[label_key]
    names = list(getattr(feature, "names", []) or [])
    return ArrayDataset(x, torch.as_tensor(ds[label_key]), names or None)
