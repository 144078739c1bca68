"""``dataset = { name = "hf", ... }`` on sources the tests write (parquet with a writer column, imagefolder PNGs):
through the config planner, natural-id, a short ``fedcore run``, the per-batch transform, offline and unsafe
sources. Nothing is downloaded: offline mode is switched on where a hub id is named."""
import importlib.util
import os
import pickle
import textwrap

import numpy as np
import pytest
import torch

from fedcore.builtin import NaturalIdPartition
from fedcore.data import ImageDataset, gather
from fedcore.data.transform import ImageTransform, TransformSettings, model_input_config
from fedcore.errors import ConfigError
from fedcore.experiment.build import materialize, plan
from fedcore.experiment.config import validate
from fedcore.testing import ContractFixture, build_engine

pytestmark = pytest.mark.skipif(importlib.util.find_spec("datasets") is None or importlib.util.find_spec("PIL") is None,
                                reason="needs datasets and pillow")
"""Looked up, not imported: ``datasets`` (with pandas and pyarrow) is imported by the tests that use it."""

WRITERS = ["w2", "w0", "w1", "w0", "w2", "w2", "w1", "w0", "w1", "w2", "w0", "w1"]


def pixels(seed, shape):
    return np.random.default_rng(seed).integers(0, 256, size=shape, dtype=np.uint8)


@pytest.fixture
def parquet_source(tmp_path):
    """12 RGB 8x8 train images of 3 classes by 3 writers, 4 test images; written as HF writes parquet."""
    import datasets
    from PIL import Image
    feat = datasets.Features({"img": datasets.Image(), "fine_label": datasets.ClassLabel(names=["ant", "bee", "cat"]),
                              "writer_id": datasets.Value("string")})
    arrays = [pixels(i, (8, 8, 3)) for i in range(16)]
    rows = {"img": [Image.fromarray(a) for a in arrays], "fine_label": [i % 3 for i in range(16)],
            "writer_id": WRITERS + ["w0"] * 4}
    full = datasets.Dataset.from_dict(rows, features=feat)
    full.select(range(12)).to_parquet(str(tmp_path / "train.parquet"))
    full.select(range(12, 16)).to_parquet(str(tmp_path / "test.parquet"))
    return tmp_path, arrays


def hf_spec(root, **extra):
    return {"name": "hf", "path": "parquet", "data_files": {"train": str(root / "train.parquet"),
                                                            "test": str(root / "test.parquet")},
            "image": "img", "label": "fine_label", "cache_dir": str(root / "cache"), **extra}


def config(dataset, **extra):
    base = {"name": "hf-test", "rounds": 2, "num_clients": 3, "seed": 0, "dataset": dataset,
            "model": {"name": "micro-cnn", "in_chans": 3, "width": 8},
            "pipeline": {"partition": {"name": "natural-id", "partition_by": "writer_id"},
                         "local_update": {"name": "sgd", "lr": 0.1, "batch_size": 4}}}
    base.update(extra)
    return validate(base)


def test_parquet_through_the_planner_keeps_images_compact_and_columns(parquet_source):
    root, arrays = parquet_source
    m = materialize(plan(config(hf_spec(root))))
    train, test = m.train, m.test
    assert isinstance(train, ImageDataset) and len(train) == 12 and len(test) == 4
    assert train.images.dtype == torch.uint8 and train.images.shape == (12, 3, 8, 8)
    assert train.stored_bytes == 12 * 3 * 8 * 8  # one byte a pixel value, not four
    assert train.classes == ["ant", "bee", "cat"] and train.y.tolist() == [i % 3 for i in range(12)]
    assert list(train.columns["writer_id"]) == WRITERS and test.y.tolist() == [0, 1, 2, 0]
    assert m.model[-1].out_features == 3  # num_classes from the data
    x, y = gather(train, [5, 2])  # the micro CNN declares no input config: [0, 1], stored size
    assert x.dtype == torch.float32 and x.shape == (2, 3, 8, 8)
    assert torch.allclose(x[0], torch.from_numpy(arrays[5]).permute(2, 0, 1).float() / 255) and y.tolist() == [2, 2]


def test_natural_id_on_the_writer_column_by_hand(parquet_source):
    root, _ = parquet_source
    m = materialize(plan(config(hf_spec(root))))
    fx = ContractFixture(data_factory=lambda: (m.train, m.test), num_clients=3)
    part = build_engine([NaturalIdPartition(partition_by="writer_id")], fx).run_ctx.partition
    # writers sorted w0, w1, w2; each client's rows in file order
    assert [list(p) for p in part.train] == [[1, 3, 7, 10], [2, 6, 8, 11], [0, 4, 5, 9]]


def test_a_short_fedcore_run_on_parquet_with_natural_id(parquet_source, capsys):
    from fedcore.cli import main

    root, _ = parquet_source
    cfg = root / "hf.toml"
    cfg.write_text(textwrap.dedent(f"""
        name = "hf-natural-id"
        rounds = 2
        num_clients = 3
        model = {{ name = "micro-cnn", in_chans = 3, width = 8 }}
        [dataset]
        name = "hf"
        path = "parquet"
        data_files = {{ train = "{root}/train.parquet", test = "{root}/test.parquet" }}
        image = "img"
        label = "fine_label"
        cache_dir = "{root}/cache"
        [pipeline]
        partition = {{ name = "natural-id", partition_by = "writer_id" }}
        local_update = {{ name = "sgd", lr = 0.1, batch_size = 4 }}
        """))
    rc = main(["run", str(cfg), "--out", str(root / "run"), "--progress", "none"])
    _, err = capsys.readouterr()
    assert rc == 0, err
    rows = [line for line in (root / "run" / "metrics.jsonl").read_text().splitlines() if line.strip()]
    assert len(rows) == 2 and '"num_examples": 12' in rows[0]  # all three writers' 4 images trained on
    rc = main(["run", str(cfg), "--out", str(root / "run4"), "--progress", "none", "--set", "num_clients=4"])
    _, err = capsys.readouterr()
    assert rc == 2 and len(err.strip().splitlines()) == 1 and "num_clients must be 3 (got 4)" in err


def write_imagefolder(root, sizes=None):
    from PIL import Image
    sizes = sizes or {}
    written = {}
    for c, cls in enumerate(("cat", "dog")):
        (root / "train" / cls).mkdir(parents=True)
        (root / "test" / cls).mkdir(parents=True)
        for i in range(3):
            shape = sizes.get((cls, i), (6, 6))
            arr = pixels(10 * c + i, (*shape, 3))
            Image.fromarray(arr).save(root / "train" / cls / f"{i}.png")
            written[(cls, i)] = arr
        Image.fromarray(pixels(99 + c, (6, 6, 3))).save(root / "test" / cls / "0.png")
    return written


@pytest.mark.parametrize("how", ["builder", "folder"])
def test_imagefolder_of_pngs(tmp_path, how):
    written = write_imagefolder(tmp_path / "data")
    spec = ({"path": "imagefolder", "data_dir": str(tmp_path / "data")} if how == "builder"
            else {"path": str(tmp_path / "data")})
    m = materialize(plan(config({"name": "hf", "cache_dir": str(tmp_path / "cache"), **spec},
                                pipeline={"partition": "iid"}, num_clients=2)))
    assert m.train.classes == ["cat", "dog"] and sorted(m.train.y.tolist()) == [0, 0, 0, 1, 1, 1]
    assert m.train.images.dtype == torch.uint8 and len(m.test) == 2
    stored = {tuple(m.train.images[i].permute(1, 2, 0).reshape(-1).tolist()) for i in range(6)}
    assert stored == {tuple(a.reshape(-1).tolist()) for a in written.values()}  # PNG is lossless
    # the two storage routes (one uint8 tensor; images decoded one by one, as from an Arrow table) give the same
    # batch, in canonical strides: a channels-last batch would convolve with other kernels (the digits cache bug)
    as_tensor, _ = m.train.gather(torch.tensor([4, 0, 2]))
    decoded = [m.train.images[i].permute(1, 2, 0).contiguous().permute(2, 0, 1) for i in (4, 0, 2)]  # as decoded
    one_by_one = m.train.transform(decoded)
    assert torch.equal(as_tensor, one_by_one)
    assert as_tensor.is_contiguous() and one_by_one.is_contiguous()


def test_images_of_different_sizes_stay_encoded_and_need_a_size(tmp_path):
    write_imagefolder(tmp_path / "data", sizes={("dog", 1): (10, 6)})
    spec = {"name": "hf", "path": str(tmp_path / "data"), "cache_dir": str(tmp_path / "cache")}
    with pytest.raises(ConfigError, match=r"dataset hf: the images differ in size and neither the dataset"):
        materialize(plan(config(spec, pipeline={"partition": "iid"}, num_clients=2)))
    m = materialize(plan(config({**spec, "size": 4}, pipeline={"partition": "iid"}, num_clients=2)))
    assert m.train.stored_bytes == 0  # left in the Arrow table, decoded per batch
    x, _ = gather(m.train, range(6))
    assert x.shape == (6, 3, 4, 4) and 0.0 <= float(x.min()) and float(x.max()) <= 1.0
    shipped = pickle.loads(pickle.dumps(m.train))  # what an executor sends to its workers
    assert torch.equal(gather(shipped, range(6))[0], x)
    assert torch.equal(gather(m.train.subset([4, 1]), [0, 1])[0], x[[4, 1]])


def test_the_transform_resizes_and_normalises_as_the_timm_model_says():
    timm = pytest.importorskip("timm")
    model = timm.create_model("test_vit", pretrained=False, num_classes=2, img_size=12)
    config_ = model_input_config(model)
    assert config_["input_size"] == (3, 12, 12) and config_["mean"] == (0.5, 0.5, 0.5)  # the size it was built at
    value = (10, 128, 250)
    image = torch.tensor(value, dtype=torch.uint8).view(1, 3, 1, 1).expand(1, 3, 5, 5).contiguous()
    data = ImageDataset(image, torch.tensor([1]), ["a", "b"]).for_model(model)
    x, _ = gather(data, [0])
    assert x.shape == (1, 3, 12, 12)
    for c in range(3):  # a flat image stays flat under any resize: (v / 255 - mean) / std exactly
        assert torch.allclose(x[0, c], torch.full((12, 12), (value[c] / 255 - 0.5) / 0.5), atol=1e-6)
    over = ImageDataset(image, torch.tensor([1]), ["a", "b"],
                        settings=TransformSettings(size=3, mean=[0.0], std=[2.0])).for_model(model)
    assert torch.allclose(gather(over, [0])[0][0, 0], torch.full((3, 3), 10 / 255 / 2.0))  # the dataset overrides


def test_resize_keeps_the_aspect_and_crops_the_centre():
    left_dark = torch.zeros(1, 1, 4, 8, dtype=torch.uint8)
    left_dark[..., 4:] = 255
    x = ImageTransform(size=4, interpolation="nearest")(left_dark)
    # shorter side already 4: no scaling, the centre 4 columns are 2 dark then 2 bright
    assert x[0, 0].tolist() == [[0.0, 0.0, 1.0, 1.0]] * 4
    gray = ImageTransform(channels=3)(torch.full((2, 1, 2, 2), 51, dtype=torch.uint8))
    assert gray.shape == (2, 3, 2, 2) and torch.allclose(gray, torch.full_like(gray, 0.2))


def test_clip_models_ask_for_unnormalised_images_at_their_size():
    pytest.importorskip("open_clip")
    from fedcore_clip.backbone import ImagePrep

    prep = ImagePrep(16, (0.5, 0.5, 0.5), (0.25, 0.25, 0.25))
    transform = TransformSettings().resolve(torch.nn.Sequential(prep))
    assert transform.size == (16, 16) and transform.mean is None and transform.std is None


def test_a_missing_column_lists_the_columns(parquet_source):
    root, _ = parquet_source
    with pytest.raises(ConfigError, match=r"^dataset hf: column 'image' not in parquet \(train split\); columns: img, "
                                          r"fine_label, writer_id$"):
        materialize(plan(config(hf_spec(root, image="image"))))


def test_offline_and_not_cached_is_one_line_naming_the_dataset_and_the_caches(tmp_path, monkeypatch):
    import datasets
    import huggingface_hub.constants

    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", True)  # what HF_HUB_OFFLINE=1 sets at import
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    spec = {"name": "hf", "path": "uoft-cs/cifar10", "image": "img", "cache_dir": str(tmp_path / "empty-cache")}
    with pytest.raises(ConfigError) as info:
        materialize(plan(config(spec)))
    message = str(info.value)
    assert "\n" not in message and message.startswith("dataset hf: path='uoft-cs/cifar10' is not a local folder")
    assert str(tmp_path / "empty-cache") in message and "offline mode is on (HF_HUB_OFFLINE" in message


def test_a_missing_local_path_or_data_file_is_one_line(tmp_path):
    with pytest.raises(ConfigError, match=r"^dataset hf: path='.*nope': no data found"):
        materialize(plan(config({"name": "hf", "path": str(tmp_path / "nope"), "cache_dir": str(tmp_path)})))
    spec = {"name": "hf", "path": "parquet", "data_files": str(tmp_path / "x.parquet"), "cache_dir": str(tmp_path)}
    with pytest.raises(ConfigError, match=r"^dataset hf: .*no data found \(Unable to find '.*x.parquet'\)$"):
        materialize(plan(config(spec)))
    with pytest.raises(ConfigError, match=r"split 'validation' not in .*; available: \['test', 'train'\]"):
        write_imagefolder(tmp_path / "f")
        materialize(plan(config({"name": "hf", "path": str(tmp_path / "f"), "cache_dir": str(tmp_path),
                                 "test_split": "validation"})))


class Payload:
    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return os.system, (f"touch {self.marker}",)


def test_scripts_pickles_and_postscript_are_refused_without_running_anything(tmp_path):
    from PIL import Image
    marker = tmp_path / "pwned"
    script_dir = tmp_path / "myset"
    script_dir.mkdir()
    (script_dir / "myset.py").write_text(f"open({str(marker)!r}, 'w').close()\n")
    (script_dir / "data.csv").write_text("image,label\n")
    for path in (script_dir, script_dir / "myset.py"):
        with pytest.raises(ConfigError, match=r"is a dataset script \(myset.py\); fedcore never runs code"):
            materialize(plan(config({"name": "hf", "path": str(path), "cache_dir": str(tmp_path)})))
    (tmp_path / "frame.pkl").write_bytes(pickle.dumps(Payload(marker)))
    with pytest.raises(ConfigError,
                       match=r"resolves to the 'pandas' builder.*reads only the builders that run no code"):
        materialize(plan(config({"name": "hf", "path": "pandas", "data_files": str(tmp_path / "frame.pkl"),
                                 "cache_dir": str(tmp_path)})))
    for cls in ("cat", "dog"):
        (tmp_path / "eps" / "train" / cls).mkdir(parents=True)
        # PostScript: PIL would hand it to Ghostscript to decode
        Image.fromarray(pixels(0, (4, 4, 3))).save(tmp_path / "eps" / "train" / cls / "0.eps")
    # refused by format before any decoder runs (an unrestricted PIL would say it cannot locate Ghostscript)
    with pytest.raises(ConfigError,
                       match=r"cannot decode an image \(cannot identify image file.*readable formats: PNG"):
        materialize(plan(config({"name": "hf", "path": str(tmp_path / "eps"), "cache_dir": str(tmp_path),
                                 "test_split": ""})))
    assert not marker.exists()


def test_hf_disk_is_the_same_loader(tmp_path):
    import datasets
    from PIL import Image
    feat = datasets.Features({"image": datasets.Image(), "label": datasets.ClassLabel(names=["a", "b"])})
    arrays = [pixels(i, (5, 5)) for i in range(4)]
    datasets.DatasetDict({
        "train": datasets.Dataset.from_dict({"image": [Image.fromarray(a) for a in arrays[:3]], "label": [0, 1, 0]},
                                            features=feat),
        "test": datasets.Dataset.from_dict({"image": [Image.fromarray(arrays[3])], "label": [1]}, features=feat),
    }).save_to_disk(str(tmp_path / "saved"))
    for spec in ({"name": "hf-disk", "path": str(tmp_path / "saved")}, {"name": "hf", "path": str(tmp_path / "saved")}):
        m = materialize(plan(config(spec, pipeline={"partition": "iid"}, num_clients=3,
                                    model={"name": "micro-cnn", "in_chans": 1, "width": 8})))
        assert isinstance(m.train, ImageDataset) and m.train.images.shape == (3, 1, 5, 5)  # grayscale stays 1 channel
        assert torch.equal(m.train.images[1, 0], torch.from_numpy(arrays[1])) and m.test.y.tolist() == [1]


def test_a_column_of_feature_vectors_is_used_as_is(tmp_path):
    import datasets
    vectors = np.random.default_rng(0).normal(size=(6, 5)).astype(np.float32)
    datasets.Dataset.from_dict({"features": vectors.tolist(), "label": ["b", "a", "b", "c", "a", "c"]}).to_parquet(
        str(tmp_path / "train.parquet"))
    spec = {"name": "hf", "path": "parquet", "data_files": str(tmp_path / "train.parquet"), "image": "features",
            "test_split": "", "cache_dir": str(tmp_path / "cache")}
    m = materialize(plan(config(spec, pipeline={"partition": "iid"}, num_clients=2,
                                model={"name": "tiny-mlp", "in_features": 5})))
    assert m.train.classes == ["a", "b", "c"] and m.train.y.tolist() == [1, 0, 1, 2, 0, 2] and m.test is None
    assert torch.equal(gather(m.train, [3])[0], torch.from_numpy(vectors[[3]]))
    with pytest.raises(ConfigError, match=r"column 'features' holds vectors; size, mean, std and transform apply to"):
        materialize(plan(config({**spec, "size": 4}, pipeline={"partition": "iid"}, num_clients=2)))
