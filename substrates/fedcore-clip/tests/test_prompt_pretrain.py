"""The tiny CLIP pre-trained by fedcore: deterministic by seed, cached on disk, loss falls; captioned data."""
from __future__ import annotations

import pytest
import torch

from fedcore_clip.captioned import captions, digits_datasets, shape_classnames, shapes_dataset
from fedcore_clip.pretrain import cache_path, pretrain_tiny_clip
from fedcore_clip.testing import one_thread


@pytest.fixture(autouse=True)
def _one_thread():
    with one_thread():
        yield


def test_pretraining_is_deterministic_cached_and_learns(tmp_path, monkeypatch):
    monkeypatch.setenv("FEDCORE_CACHE", str(tmp_path))
    a, info = pretrain_tiny_clip("shapes", steps=6, batch_size=32, seed=3, n_per_class=4)
    path = cache_path("shapes", steps=6, batch_size=32, seed=3, n_per_class=4)
    assert path.exists() and path.with_suffix(".json").exists()
    assert str(tmp_path) in info["path"] and "no external weights" in info["note"]
    b, _ = pretrain_tiny_clip("shapes", steps=6, batch_size=32, seed=3, n_per_class=4, cache=False)
    for (k, va), (_, vb) in zip(a.model.state_dict().items(), b.model.state_dict().items()):
        assert torch.equal(va, vb), f"{k} differs between two runs with one seed"
    c, _ = pretrain_tiny_clip("shapes", steps=6, batch_size=32, seed=3, n_per_class=4)  # from the cache
    assert all(torch.equal(x, y) for x, y in zip(a.model.state_dict().values(), c.model.state_dict().values()))
    assert not any(p.requires_grad for p in c.parameters())
    assert 0.0 <= info["zero_shot_pretrain"] <= 1.0


def test_captioned_sets():
    ds = shapes_dataset(2, seed=0)
    assert ds.x.shape == (60, 3, 16, 16) and ds.classes == shape_classnames() and len(ds.classes) == 30
    assert torch.equal(ds.x, shapes_dataset(2, seed=0).x)
    caps, templates = captions("shapes", ds.classes[:2])
    assert caps[0][0] == "a photo of a red circle."
    pre, train, test = digits_datasets()
    assert pre.classes[3] == "three" and len(pre) + len(train) > 1000
    assert captions("digits", pre.classes)[0][3][0] == "a photo of the digit three."
