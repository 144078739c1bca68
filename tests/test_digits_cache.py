"""The digits split is kept after its first build, and the kept copy is the exact split (no scikit-learn import)."""
import torch

from fedcore.data import digits


def test_the_second_load_reads_the_kept_split_exactly(tmp_path, monkeypatch):
    monkeypatch.setenv("FEDCORE_CACHE", str(tmp_path))
    train, test = digits.load_digits(seed=2, classes=(3, 8))
    [kept] = (tmp_path / "digits").iterdir()
    assert "seed2" in kept.name and "classes-3-8" in kept.name

    def no_build(*args, **kwargs):
        raise AssertionError("built again instead of reading the kept split")

    monkeypatch.setattr(digits, "_split", no_build)
    again_train, again_test = digits.load_digits(seed=2, classes=(3, 8))
    for a, b in ((train, again_train), (test, again_test)):
        assert torch.equal(a.x, b.x) and torch.equal(a.y, b.y) and a.classes == b.classes
    assert set(train.y.tolist()) == {0, 1} and len(train) + len(test) == 357  # 183 threes and 174 eights


def test_a_damaged_kept_split_is_built_again(tmp_path, monkeypatch):
    monkeypatch.setenv("FEDCORE_CACHE", str(tmp_path))
    train, _ = digits.load_digits(seed=0)
    [kept] = (tmp_path / "digits").iterdir()
    kept.write_bytes(kept.read_bytes()[:100])
    rebuilt, _ = digits.load_digits(seed=0)
    assert torch.equal(train.x, rebuilt.x) and torch.equal(train.y, rebuilt.y)
    assert not [p for p in kept.parent.iterdir() if ".tmp-" in p.name]


def test_a_split_built_here_and_one_read_back_train_to_the_same_numbers(tmp_path, monkeypatch):
    """Equal values are not enough: the fresh split's (N, 1, 8, 8) inputs came out of numpy's fancy indexing with a
    channel stride of 1, which torch reads as channels-last, so the first run on an empty cache convolved with
    another kernel than every later run and the demo's history depended on which process built the cache."""
    from fedcore.models import micro_cnn

    monkeypatch.setenv("FEDCORE_CACHE", str(tmp_path))
    built, _ = digits.load_digits(seed=0)
    read, _ = digits.load_digits(seed=0)
    assert built.x.stride() == read.x.stride() == (64, 64, 8, 1)
    torch.manual_seed(0)
    model = micro_cnn(num_classes=10)
    batch = torch.arange(64)
    assert torch.equal(model(built.x[batch]), model(read.x[batch]))
