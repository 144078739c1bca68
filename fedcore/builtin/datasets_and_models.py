"""Named datasets and models for configs: ``dataset = "digits"``, ``model = {name = "micro-cnn"}``,
``model = {name = "timm", arch = "deit_small_patch16_224"}`` (any timm architecture, docs/models.md)."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the loaders are imported when a dataset is built, not when the catalogue loads
    from fedcore.data.arrays import ArrayDataset
    from fedcore.data.images import ImageDataset

    Loaded = tuple[ArrayDataset | ImageDataset, ArrayDataset | ImageDataset | None]


def digits(**kwargs: Any) -> Loaded:
    """scikit-learn's embedded 8x8 digits (1,797 real images, 10 classes): (train, test)."""
    from fedcore.data.digits import load_digits

    return load_digits(**kwargs)


def synthetic(*, n: int = 256, n_test: int = 128, num_classes: int = 4, seed: int = 0, noise: float = 0.5) -> Loaded:
    """Seeded Gaussian blobs shaped 1x8x8: (train, test)."""
    from fedcore.data.synthetic import synthetic_classification

    full = synthetic_classification(n=n + n_test, num_classes=num_classes, seed=seed, noise=noise)
    return full.subset(range(n)), full.subset(range(n, n + n_test))


def image_folder(*, train: str, test: str | None = None, size: int | None = None, grayscale: bool = False) -> Loaded:
    """Image folders on disk (``root/<class>/<image>``): (train, test)."""
    from fedcore.data.files import load_image_folder

    return (load_image_folder(train, size=size, grayscale=grayscale),
            load_image_folder(test, size=size, grayscale=grayscale) if test else None)


def cifar(*, root: str, hundred: bool = False) -> Loaded:
    """CIFAR-10/100 python batches already on disk: (train, test)."""
    from fedcore.data.files import load_cifar

    return load_cifar(root, train=True, hundred=hundred), load_cifar(root, train=False, hundred=hundred)


def hf(*, path: str, subset: str | None = None, data_dir: str | None = None, data_files: Any = None,
       revision: str | None = None, cache_dir: str | None = None, split: str = "train", test_split: str = "test",
       image: str = "image", label: str = "label", grayscale: bool = False, size: Any = None, mean: Any = None,
       std: Any = None, transform: str = "auto") -> Loaded:
    """A Hugging Face dataset through datasets.load_dataset's builders (hub id, local folder, parquet/csv/imagefolder).

    ``path``, ``data_dir``, ``data_files``, ``revision``, ``cache_dir`` and ``split`` are ``load_dataset``'s;
    ``subset`` is its ``name`` (the config). ``image`` and ``label`` name the columns; every other column of
    numbers or strings is kept for partitioners (``natural-id``'s ``partition_by``). ``test_split = ""``: no test
    set. Images stay uint8; the model's pretrained config (or ``size``/``mean``/``std``) is applied per batch;
    ``transform = "none"`` gives [0, 1] inputs as stored. See docs/data.md.
    """
    from fedcore.data.hf import load_hf
    from fedcore.data.transform import TransformSettings

    settings = TransformSettings(mode=transform, size=size, mean=mean, std=std)
    return load_hf(path=path, subset=subset, data_dir=data_dir, data_files=data_files, revision=revision,
                   cache_dir=cache_dir, split=split, test_split=test_split, image=image, label=label,
                   grayscale=grayscale, settings=settings)


def hf_disk(*, path: str, train_split: str = "train", test_split: str = "test", image_key: str = "image",
            label_key: str = "label") -> Loaded:
    """A Hugging Face dataset saved with ``save_to_disk``: (train, test). The ``hf`` loader, under older names."""
    return hf(path=path, split=train_split, test_split=test_split, image=image_key, label=label_key)


def register(registry: Any) -> None:
    from fedcore.models import micro_cnn, micro_vit, micro_vit_pretrained, timm_model, tiny_mlp

    registry.add_dataset("digits", digits)
    registry.add_dataset("synthetic", synthetic)
    registry.add_dataset("image-folder", image_folder)
    registry.add_dataset("cifar", cifar)
    registry.add_dataset("hf", hf)
    registry.add_dataset("hf-disk", hf_disk)
    registry.add_model("micro-cnn", micro_cnn)
    registry.add_model("micro-vit", micro_vit)
    registry.add_model("micro-vit-pretrained", micro_vit_pretrained)
    registry.add_model("tiny-mlp", tiny_mlp)
    registry.add_model("timm", timm_model)
