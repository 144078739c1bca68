"""The loaders for real datasets on disk, run on tiny files these tests write (nothing is downloaded)."""
import os
import pickle

import numpy as np
import pytest
import torch

from fedcore.data.files import load_cifar, load_hf_disk, load_image_folder
from fedcore.data.safe_pickle import UnsafePickleError, load_data_pickle
from fedcore.errors import ConfigError


def _pixels(seed, shape):
    return np.random.default_rng(seed).integers(0, 256, size=shape, dtype=np.uint8)


def test_image_folder_reads_png_classes_and_pixels(tmp_path):
    from PIL import Image

    expected = {}
    for cls in ("cat", "dog"):
        (tmp_path / "train" / cls).mkdir(parents=True)
        for i in range(3):
            arr = _pixels(hash((cls, i)) % 1000, (8, 8, 3))
            Image.fromarray(arr).save(tmp_path / "train" / cls / f"{i}.png")
            expected[(cls, i)] = arr
    ds = load_image_folder(tmp_path / "train")
    assert ds.x.shape == (6, 3, 8, 8) and ds.x.dtype == torch.float32
    assert ds.classes == ["cat", "dog"] and ds.y.tolist() == [0, 0, 0, 1, 1, 1]  # ImageFolder sorts by class, file
    # PNG is lossless: pixel values come back exactly, scaled to [0, 1], channels first
    assert torch.allclose(ds.x[4], torch.from_numpy(expected[("dog", 1)]).permute(2, 0, 1).float() / 255)
    gray = load_image_folder(tmp_path / "train", grayscale=True, size=4)
    assert gray.x.shape == (6, 1, 4, 4)


def test_image_folder_bad_paths(tmp_path):
    with pytest.raises(FileNotFoundError, match="does not exist"):
        load_image_folder(tmp_path / "nope")


def _write_cifar10(root, n_per_batch=4):
    base = root / "cifar-10-batches-py"
    base.mkdir(parents=True)
    written = {}
    for i, name in enumerate([f"data_batch_{k}" for k in range(1, 6)] + ["test_batch"]):
        data = _pixels(i, (n_per_batch, 3072))
        labels = [(i + j) % 10 for j in range(n_per_batch)]
        with open(base / name, "wb") as fh:  # the official format: a pickled dict with bytes keys
            pickle.dump({b"batch_label": name.encode(), b"labels": labels, b"data": data,
                         b"filenames": [b"x.png"] * n_per_batch}, fh)
        written[name] = (data, labels)
    with open(base / "batches.meta", "wb") as fh:
        pickle.dump({b"label_names": [f"c{k}".encode() for k in range(10)], b"num_cases_per_batch": n_per_batch}, fh)
    return written


def test_cifar10_python_batches(tmp_path):
    written = _write_cifar10(tmp_path)
    train = load_cifar(tmp_path, train=True)
    test = load_cifar(tmp_path, train=False)
    assert train.x.shape == (20, 3, 32, 32) and test.x.shape == (4, 3, 32, 32)
    assert train.classes == [f"c{k}" for k in range(10)]
    data, labels = written["data_batch_2"]
    # rows are 1024 red, 1024 green, 1024 blue values in row-major order
    assert torch.equal((train.x[4:8] * 255).round().to(torch.uint8), torch.from_numpy(data.reshape(4, 3, 32, 32)))
    assert train.y[4:8].tolist() == labels and test.y.tolist() == written["test_batch"][1]
    # the extracted directory itself works too
    assert len(load_cifar(tmp_path / "cifar-10-batches-py")) == 20


def test_cifar100_python_files_and_missing_files(tmp_path):
    base = tmp_path / "cifar-100-python"
    base.mkdir()
    for name, n in (("train", 5), ("test", 2)):
        with open(base / name, "wb") as fh:
            pickle.dump({b"data": _pixels(n, (n, 3072)), b"fine_labels": list(range(n)),
                         b"coarse_labels": [0] * n}, fh)
    with open(base / "meta", "wb") as fh:
        pickle.dump({b"fine_label_names": [f"f{k}".encode() for k in range(100)],
                     b"coarse_label_names": [b"x"] * 20}, fh)
    train = load_cifar(tmp_path, hundred=True)
    assert train.x.shape == (5, 3, 32, 32) and train.y.tolist() == [0, 1, 2, 3, 4] and len(train.classes) == 100
    with pytest.raises(FileNotFoundError, match=r"data_batch_1.*nothing is downloaded"):
        load_cifar(tmp_path, hundred=False)


class _Payload:
    """What a crafted batch file carries: unpickling it would create ``marker`` (a shell command on load)."""

    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return os.system, (f"touch {self.marker}",)


@pytest.mark.parametrize("protocol", [0, 2, 4, 5])
def test_a_crafted_cifar_batch_is_refused_without_running_anything(tmp_path, protocol):
    _write_cifar10(tmp_path)
    marker = tmp_path / "pwned"
    crafted = tmp_path / "cifar-10-batches-py" / "data_batch_3"
    with open(crafted, "wb") as fh:
        pickle.dump({b"labels": [0], b"data": _Payload(marker)}, fh, protocol=protocol)
    with pytest.raises(UnsafePickleError, match=r"data_batch_3: refused to load: the file asks for posix\.system"):
        load_cifar(tmp_path, train=True)
    assert not marker.exists()  # refused before anything was called
    crafted.write_bytes(pickle.dumps(_Payload(marker), protocol=protocol))  # the payload as the whole file
    with pytest.raises(UnsafePickleError, match="nothing in it was executed"):
        load_cifar(tmp_path, train=True)
    assert not marker.exists()


@pytest.mark.parametrize("protocol", [0, 1, 2, 3, 4, 5])
def test_genuine_batches_load_whatever_the_pickle_protocol(tmp_path, protocol):
    data, labels = _pixels(3, (2, 3072)), [3, 7]
    path = tmp_path / "batch"
    path.write_bytes(pickle.dumps({b"data": data, b"labels": labels, b"n": np.int64(2), b"f": 0.5}, protocol=protocol))
    batch = load_data_pickle(path)
    assert np.array_equal(batch[b"data"], data) and batch[b"labels"] == labels and batch[b"n"] == 2
    # numpy 1 (and the official Python 2 files) name numpy.core.multiarray rather than numpy._core.multiarray
    old = pickle.dumps({b"data": data}, protocol=2).replace(b"numpy._core.multiarray", b"numpy.core.multiarray")
    path.write_bytes(old)
    assert np.array_equal(load_data_pickle(path)[b"data"], data)


def test_a_truncated_or_foreign_batch_is_one_clear_error(tmp_path):
    _write_cifar10(tmp_path)
    batch = tmp_path / "cifar-10-batches-py" / "data_batch_2"
    batch.write_bytes(batch.read_bytes()[:100])
    with pytest.raises(ValueError, match=r"data_batch_2: not a CIFAR python batch file \((UnpicklingError|EOFError)"):
        load_cifar(tmp_path)
    batch.write_bytes(pickle.dumps([1, 2, 3]))
    with pytest.raises(ValueError, match=r"data_batch_2: not a CIFAR python batch file: expected a dict with keys"):
        load_cifar(tmp_path)


def test_hf_save_to_disk_image_feature_and_class_names(tmp_path):
    datasets = pytest.importorskip("datasets")
    from PIL import Image

    # a dark image (all pixels 0 or 1) must be scaled like every other image: by 255
    arrays = [np.full((8, 8), 1, dtype=np.uint8)] + [_pixels(i, (8, 8)) for i in range(5)]
    feat = datasets.Features({"image": datasets.Image(), "label": datasets.ClassLabel(names=["cat", "dog"])})
    dd = datasets.DatasetDict({
        "train": datasets.Dataset.from_dict({"image": [Image.fromarray(a) for a in arrays[:4]], "label": [0, 1, 0, 1]},
                                            features=feat),
        "test": datasets.Dataset.from_dict({"image": [Image.fromarray(a) for a in arrays[4:]], "label": [1, 0]},
                                           features=feat),
    })
    dd.save_to_disk(str(tmp_path / "hf"))
    train = load_hf_disk(tmp_path / "hf")
    test = load_hf_disk(tmp_path / "hf", split="test")
    assert train.x.shape == (4, 1, 8, 8) and test.x.shape == (2, 1, 8, 8)
    assert train.classes == ["cat", "dog"] and train.y.tolist() == [0, 1, 0, 1] and test.y.tolist() == [1, 0]
    assert torch.allclose(train.x[0], torch.full((1, 8, 8), 1 / 255))
    assert torch.allclose(train.x[2, 0], torch.from_numpy(arrays[2]).float() / 255)
    with pytest.raises(ConfigError, match=r"split 'validation' not in .*available: \['test', 'train'\]"):
        load_hf_disk(tmp_path / "hf", split="validation")
    with pytest.raises(ConfigError, match=r"column 'img' not in .*columns: image, label"):
        load_hf_disk(tmp_path / "hf", image_key="img")


def test_hf_single_dataset_rgb_channels_last(tmp_path):
    datasets = pytest.importorskip("datasets")
    from PIL import Image

    rgb = [_pixels(i, (8, 8, 3)) for i in range(3)]
    datasets.Dataset.from_dict({"img": [Image.fromarray(a) for a in rgb], "y": [2, 1, 0]}).save_to_disk(
        str(tmp_path / "hf2"))
    ds = load_hf_disk(tmp_path / "hf2", image_key="img", label_key="y")
    assert ds.x.shape == (3, 3, 8, 8) and ds.y.tolist() == [2, 1, 0]
    assert torch.allclose(ds.x[1], torch.from_numpy(rgb[1]).permute(2, 0, 1).float() / 255)


def test_registered_dataset_factories_use_the_loaders(tmp_path):
    import fedcore

    _write_cifar10(tmp_path)
    train, test = fedcore.plugins.lookup("cifar", kind="dataset").obj(root=str(tmp_path))
    assert len(train) == 20 and len(test) == 4
