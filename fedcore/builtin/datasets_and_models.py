"""Named datasets and models for configs: ``dataset = "digits"``, ``model = {name = "micro-cnn"}``,
``model = {name = "timm", arch = "deit_small_patch16_224"}`` (any timm architecture, docs/models.md)."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the loaders are imported when a dataset is built, not when the catalogue loads
    from fedcore.data.arrays import ArrayDataset

    Loaded = tuple[ArrayDataset, ArrayDataset | None]


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


def hf_disk(*, path: str, train_split: str = "train", test_split: str | None = "test", image_key: str = "image",
            label_key: str = "label") -> Loaded:
    """A Hugging Face dataset saved with ``save_to_disk``: (train, test)."""
    from fedcore.data.files import load_hf_disk

    train = load_hf_disk(path, split=train_split, image_key=image_key, label_key=label_key)
    test = load_hf_disk(path, split=test_split, image_key=image_key, label_key=label_key) if test_split else None
    return train, test


def register(registry: Any) -> None:
    from fedcore.models import micro_cnn, micro_vit, micro_vit_pretrained, timm_model, tiny_mlp

    registry.add_dataset("digits", digits)
    registry.add_dataset("synthetic", synthetic)
    registry.add_dataset("image-folder", image_folder)
    registry.add_dataset("cifar", cifar)
    registry.add_dataset("hf-disk", hf_disk)
    registry.add_model("micro-cnn", micro_cnn)
    registry.add_model("micro-vit", micro_vit)
    registry.add_model("micro-vit-pretrained", micro_vit_pretrained)
    registry.add_model("tiny-mlp", tiny_mlp)
    registry.add_model("timm", timm_model)
