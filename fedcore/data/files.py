"""Loaders for real datasets on disk: image folders, CIFAR-10/100 python batches, Hugging Face ``save_to_disk``
(through the ``hf`` loader, :mod:`fedcore.data.hf`).

Nothing is downloaded: these read what a user already has. Each returns an :class:`ArrayDataset`.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import torch

from fedcore.data.arrays import ArrayDataset
from fedcore.data.images import ImageDataset
from fedcore.data.safe_pickle import UnsafePickleError, load_data_pickle


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
    """CIFAR-10/100 from the official python batches already extracted under ``root``.

    Reads the batch files directly (the format torchvision reads) rather than through torchvision's
    dataset class, whose md5 check refuses anything but the exact official files (subsets, test fixtures).
    The files are pickles; they are read by :mod:`fedcore.data.safe_pickle`, which refuses a file that names
    anything but containers, numbers, bytes and numpy arrays (a crafted batch cannot run code on load).
    ``root`` is the directory holding ``cifar-10-batches-py`` / ``cifar-100-python``, or that directory itself.
    """
    root = Path(root)
    folder = "cifar-100-python" if hundred else "cifar-10-batches-py"
    base = root / folder if (root / folder).is_dir() else root
    if hundred:
        files = ["train"] if train else ["test"]
        label_key, meta, names_key = b"fine_labels", "meta", b"fine_label_names"
    else:
        files = [f"data_batch_{i}" for i in range(1, 6)] if train else ["test_batch"]
        label_key, meta, names_key = b"labels", "batches.meta", b"label_names"
    missing = [f for f in files + [meta] if not (base / f).is_file()]
    if missing:
        raise FileNotFoundError(f"CIFAR-{100 if hundred else 10} python batches not found under {root}:"
                                f" missing {missing}"
                                f" (expected the extracted {folder}/ directory; nothing is downloaded)")
    data: list[np.ndarray] = []
    labels: list[int] = []
    for name in files:
        batch = _batch(base / name, (b"data", label_key))
        data.append(np.asarray(batch[b"data"], dtype=np.uint8).reshape(-1, 3, 32, 32))
        labels.extend(int(v) for v in batch[label_key])
    names = _batch(base / meta, (names_key,))[names_key]
    classes = [n.decode() if isinstance(n, bytes) else str(n) for n in names]
    x = torch.from_numpy(np.concatenate(data)).float() / 255.0
    return ArrayDataset(x, torch.as_tensor(labels), classes)


def _batch(path: Path, keys: tuple[bytes, ...]) -> dict[Any, Any]:
    """One CIFAR python file: a pickled dict with bytes keys, read by the restricted unpickler, never pickle.load."""
    try:
        batch = load_data_pickle(path)
    except UnsafePickleError:
        raise
    except Exception as exc:  # truncated or not a pickle at all
        raise ValueError(f"{path}: not a CIFAR python batch file ({type(exc).__name__}: {exc})") from exc
    missing = [k for k in keys if not isinstance(batch, dict) or k not in batch]
    if missing:
        raise ValueError(f"{path}: not a CIFAR python batch file: expected a dict with keys {list(keys)}, "
                         f"missing {missing}")
    return batch


def load_hf_disk(
    path: str | Path, *, split: str = "train", image_key: str = "image", label_key: str = "label"
) -> ArrayDataset:
    """One split of a Hugging Face dataset saved with ``save_to_disk`` (a ``Dataset`` is the split ``train``), as
    [0, 1] tensors: the ``hf`` loader (:func:`fedcore.data.hf.load_hf`) with every image transformed at once.
    Integer pixels are scaled by 255, float arrays are taken as already in [0, 1] (by dtype, not by each image's
    max, so a dark image is scaled like every other one)."""
    from fedcore.data.hf import load_hf
    from fedcore.data.transform import TransformSettings

    train, _ = load_hf(path=str(path), split=split, test_split="", image=image_key, label=label_key,
                       settings=TransformSettings(mode="none"))
    return train.as_arrays() if isinstance(train, ImageDataset) else train
