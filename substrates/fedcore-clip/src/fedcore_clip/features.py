"""Cached frozen image features: the image tower is frozen, so without augmentation each image is encoded once.

Features live in a :class:`fedcore.Stash` (a client's ``state.stash`` for its own data, the run's stash for
the server's test set), keyed by a tag, the dataset size and the backbone's fingerprint, so a cache can
never be reused across backbones.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from fedcore.data import gather, labels_of
from fedcore.stash import Stash, StashKey
from fedcore_clip.backbone import FrozenCLIP

FEATURES = StashKey[dict]("prompt.image_features")
SUPPORT = StashKey[tuple]("prompt.support")
"""The indices a client last trained its prompt on (its few-shot support set, after any data selection)."""


def gather_images(dataset: Any, indices: Sequence[int]) -> torch.Tensor:
    """Model inputs of ``dataset[indices]`` (an image dataset's transform applied)."""
    return gather(dataset, [int(i) for i in indices])[0]


def gather_labels(dataset: Any, indices: Sequence[int]) -> torch.Tensor:
    labels = labels_of(dataset)
    return torch.as_tensor(labels[[int(i) for i in indices]], dtype=torch.long)


def encode_all(backbone: FrozenCLIP, dataset: Any, indices: Sequence[int], batch_size: int = 256) -> torch.Tensor:
    """Normalised image features of ``dataset[indices]`` (no cache)."""
    idx = list(indices)
    if not idx:
        return torch.zeros(0, backbone.embed_dim)
    out = [backbone.encode_image(gather_images(dataset, idx[s:s + batch_size])) for s in range(0, len(idx), batch_size)]
    return torch.cat(out)


def cached_features(stash: Stash, backbone: FrozenCLIP, dataset: Any, indices: Sequence[int], *, tag: str = "train",
                    batch_size: int = 256) -> torch.Tensor:
    """Features of ``dataset[indices]``, encoding only the indices not cached yet."""
    store = stash.setdefault(FEATURES, {})
    key = (tag, len(dataset), backbone.fingerprint())
    rows: dict[int, torch.Tensor] = store.setdefault(key, {})
    idx = [int(i) for i in indices]
    missing = sorted({i for i in idx if i not in rows})
    if missing:
        feats = encode_all(backbone, dataset, missing, batch_size)
        rows.update(zip(missing, feats))
    if not idx:
        return torch.zeros(0, backbone.embed_dim)
    return torch.stack([rows[i] for i in idx])
