"""The tiny CLIP pre-trained by fedcore: deterministic by seed and thread count, cached on disk, learns; captioned
data."""
from __future__ import annotations

from pathlib import Path

import pytest
import torch

from fedcore_clip.captioned import captions, digits_datasets, shape_classnames, shapes_dataset
from fedcore_clip.pretrain import cache_path, pretrain_tiny_clip
from fedcore_clip.testing import one_thread


@pytest.fixture(autouse=True)
def _one_thread():
    with one_thread():
        yield


def test_pretraining_is_deterministic_by_seed_and_thread_count_and_cached(tmp_path, monkeypatch):
    """Two real builds with one seed, by a caller on one intra-op thread and by one on two, each into its own cache:
    one cache key, the same bytes (so the same seed gives the same weights whatever the thread count: before the
    fix these differed) and each caller's thread count back; a third call loads the first build from its cache.
    Both builds run in this process: the thread count is the caller's setting, not the process's. Two steps are
    enough: with the build's thread count left to the caller, one step already gives other weights on two threads."""
    files, built = [], []
    for threads in (1, 2):  # the autouse one_thread fixture restores the count afterwards
        monkeypatch.setenv("FEDCORE_CACHE", str(tmp_path / f"t{threads}"))
        torch.set_num_threads(threads)
        model, info = pretrain_tiny_clip("shapes", steps=2, batch_size=32, seed=3, n_per_class=4)
        assert torch.get_num_threads() == threads, "the caller's thread count was not restored"
        path = cache_path("shapes", steps=2, batch_size=32, seed=3, n_per_class=4)
        assert path.exists() and path.with_suffix(".json").exists() and Path(info["path"]) == path
        assert str(tmp_path / f"t{threads}") in info["path"] and "no external weights" in info["note"]
        files.append(path)
        built.append(model)
    assert files[0] != files[1] and files[0].name == files[1].name  # two builds (not a cache hit), one key
    assert files[0].read_bytes() == files[1].read_bytes(), "one seed gave other weights (on one thread vs two)"
    for (k, va), (_, vb) in zip(built[0].model.state_dict().items(), built[1].model.state_dict().items()):
        assert torch.equal(va, vb), f"{k} differs between two builds with one seed"
    monkeypatch.setenv("FEDCORE_CACHE", str(tmp_path / "t1"))
    written = files[0].stat().st_mtime_ns
    cached, _ = pretrain_tiny_clip("shapes", steps=2, batch_size=32, seed=3, n_per_class=4)  # from the cache
    assert files[0].stat().st_mtime_ns == written, "the third call built again instead of reading its cache"
    assert all(torch.equal(x, y) for x, y in zip(built[0].model.state_dict().values(),
                                                 cached.model.state_dict().values()))
    assert not any(p.requires_grad for p in cached.parameters())


@pytest.mark.slow  # a whole (tiny) pre-training run to show learning: the suite runs it, --quick does not
def test_pretraining_learns_zero_shot_classification():
    """30 training steps on 4 captioned shapes per class lift zero-shot accuracy (30 classes, chance 0.033) well
    above the untrained CLIP's; one thread inside the build, so the numbers are the same on every machine."""
    _, untrained = pretrain_tiny_clip("shapes", steps=0, batch_size=32, seed=3, n_per_class=4, cache=False)
    _, trained = pretrain_tiny_clip("shapes", steps=30, batch_size=32, seed=3, n_per_class=4, cache=False)
    assert untrained["zero_shot_pretrain"] < 0.05
    assert trained["zero_shot_pretrain"] >= untrained["zero_shot_pretrain"] + 0.08, (untrained, trained)


def test_captioned_sets():
    ds = shapes_dataset(2, seed=0)
    assert ds.x.shape == (60, 3, 16, 16) and ds.classes == shape_classnames() and len(ds.classes) == 30
    assert torch.equal(ds.x, shapes_dataset(2, seed=0).x)
    caps, templates = captions("shapes", ds.classes[:2])
    assert caps[0][0] == "a photo of a red circle."
    pre, train, test = digits_datasets()
    assert pre.classes[3] == "three" and len(pre) + len(train) > 1000
    assert captions("digits", pre.classes)[0][3][0] == "a photo of the digit three."
