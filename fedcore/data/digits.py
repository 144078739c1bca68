"""The embedded default dataset: scikit-learn's 8x8 handwritten digits (1,797 real images, 10 classes).

It ships inside scikit-learn, so it loads offline. Pixels are scaled to [0, 1] and kept as
1x8x8 images; the train/test split is stratified and seeded.
"""
from __future__ import annotations

import numpy as np
import torch

from fedcore.data.arrays import ArrayDataset


def load_digits(*, test_fraction: float = 0.25, seed: int = 0, classes: tuple[int, ...] | None = None
                ) -> tuple[ArrayDataset, ArrayDataset]:
    """(train, test) of the digits set; ``classes`` keeps only those labels (relabelled 0..k-1)."""
    from sklearn.datasets import load_digits as sk_load_digits
    from sklearn.model_selection import train_test_split

    if not 0.0 < test_fraction < 1.0:
        raise ValueError(f"test_fraction={test_fraction}; must be in (0, 1)")
    bunch = sk_load_digits()
    x = (bunch.images.astype(np.float32) / 16.0)[:, None, :, :]
    y = bunch.target.astype(np.int64)
    names = [str(i) for i in range(10)]
    if classes is not None:
        keep = np.isin(y, classes)
        remap = {c: i for i, c in enumerate(classes)}
        x, y = x[keep], np.asarray([remap[int(v)] for v in y[keep]])
        names = [str(c) for c in classes]
    xtr, xte, ytr, yte = train_test_split(x, y, test_size=test_fraction, random_state=seed, stratify=y)
    return (ArrayDataset(torch.from_numpy(xtr), torch.from_numpy(ytr), names),
            ArrayDataset(torch.from_numpy(xte), torch.from_numpy(yte), names))
