"""The embedded default dataset: scikit-learn's 8x8 handwritten digits (1,797 real images, 10 classes).

It ships inside scikit-learn, so it loads offline. Pixels are scaled to [0, 1] and kept as
1x8x8 images; the train/test split is stratified and seeded.

Importing scikit-learn costs more CPU than the rest of a demo run's set-up (about 1.3 s here), so each split is
kept after its first build as an ``.npz`` of the exact arrays under ``$FEDCORE_CACHE/digits/``, keyed on
scikit-learn's version and the split's settings; the same settings give the same arrays whichever process built it.
"""
from __future__ import annotations

from importlib.metadata import version
import os
from pathlib import Path
import zipfile

import numpy as np
import torch

from fedcore.data.arrays import ArrayDataset

_ARRAYS = ("x_train", "y_train", "x_test", "y_test")


def load_digits(*, test_fraction: float = 0.25, seed: int = 0, classes: tuple[int, ...] | None = None
                ) -> tuple[ArrayDataset, ArrayDataset]:
    """(train, test) of the digits set; ``classes`` keeps only those labels (relabelled 0..k-1)."""
    if not 0.0 < test_fraction < 1.0:
        raise ValueError(f"test_fraction={test_fraction}; must be in (0, 1)")
    names = [str(c) for c in classes] if classes is not None else [str(i) for i in range(10)]
    path = _cache_path(test_fraction, seed, classes)
    arrays = _read(path)
    if arrays is None:
        arrays = _split(test_fraction, seed, classes)
        _write(path, arrays)
    xtr, ytr, xte, yte = (torch.from_numpy(arrays[k]) for k in _ARRAYS)
    return ArrayDataset(xtr, ytr, names), ArrayDataset(xte, yte, names)


def _split(test_fraction: float, seed: int, classes: tuple[int, ...] | None) -> dict[str, np.ndarray]:
    from sklearn.datasets import load_digits as sk_load_digits
    from sklearn.model_selection import train_test_split

    bunch = sk_load_digits()
    x = (bunch.images.astype(np.float32) / 16.0)[:, None, :, :]
    y = bunch.target.astype(np.int64)
    if classes is not None:
        keep = np.isin(y, classes)
        remap = {c: i for i, c in enumerate(classes)}
        x, y = x[keep], np.asarray([remap[int(v)] for v in y[keep]], dtype=np.int64)
    xtr, xte, ytr, yte = train_test_split(x, y, test_size=test_fraction, random_state=seed, stratify=y)
    return dict(zip(_ARRAYS, (xtr, ytr, xte, yte), strict=True))


def _cache_path(test_fraction: float, seed: int, classes: tuple[int, ...] | None) -> Path:
    root = Path(os.environ.get("FEDCORE_CACHE", Path.home() / ".cache" / "fedcore")) / "digits"
    kept = "all" if classes is None else "-".join(str(c) for c in classes)
    return root / f"sklearn-{version('scikit-learn')}_test{test_fraction!r}_seed{seed}_classes-{kept}.npz"


def _read(path: Path) -> dict[str, np.ndarray] | None:
    try:
        with np.load(path, allow_pickle=False) as npz:
            return {k: npz[k] for k in _ARRAYS}
    except (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile):  # absent, cut short, foreign: build
        return None


def _write(path: Path, arrays: dict[str, np.ndarray]) -> None:
    """Written under a per-process name and moved into place, so readers never see half a file."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f"{path.stem}.tmp-{os.getpid()}.npz")
        np.savez(tmp, **arrays)  # type: ignore[arg-type]  # the stubs take a keyword for allow_pickle
        os.replace(tmp, path)
    except OSError:  # a read-only cache only costs the next process the build
        pass
