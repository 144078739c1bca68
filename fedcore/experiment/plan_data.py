"""The data a dry run and a smoke run stand on: the dataset's shape, its labels, and inputs that cost nothing.

A paper's data is usually not on the machine that plans it (CIFAR-10, ImageNet subsets, Caltech101 folders), so
a config states its shape in a ``[plan]`` table that the data loader never sees::

    [plan]
    train = 50000            # training samples
    test = 10000
    classes = 10
    input = [3, 224, 224]    # one input

Without the table the real loader runs once and only its labels, class names and input shape are kept. With the
table the labels are synthetic: balanced over the classes (``train // classes`` each, the remainder to the first
classes) in an order drawn from the run's seed, so partitions that need labels (Dirichlet, shards, few-shot) give
realistic per-client sample counts. The dry run's inputs are meta tensors (shapes only); the smoke run's are
seeded uniform noise of the same shape, made only for the samples it trains on.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import attrs
import numpy as np
import torch

from fedcore.data.arrays import ArrayDataset, labels_of
from fedcore.errors import ConfigError
from fedcore.rng import numpy_generator, torch_generator


@attrs.frozen(kw_only=True)
class DataShape:
    """What the plan knows of the data: labels of the training and test sets, class names, one input's shape."""

    train_labels: np.ndarray = attrs.field(repr=False)
    test_labels: np.ndarray = attrs.field(repr=False)
    classes: tuple[str, ...]
    input: tuple[int, ...]
    synthetic: bool
    source: str

    @property
    def train(self) -> int:
        return len(self.train_labels)

    @property
    def test(self) -> int:
        return len(self.test_labels)

    def describe(self) -> dict[str, Any]:
        return {"train": self.train, "test": self.test, "classes": len(self.classes), "input": list(self.input),
                "synthetic_labels": self.synthetic, "source": self.source}


def balanced_labels(n: int, classes: int, seed: int, purpose: str) -> np.ndarray:
    """``n`` labels over ``classes`` classes, as equal as counts allow, in a seeded order."""
    labels = np.arange(n, dtype=np.int64) % classes
    return numpy_generator(seed, "plan-labels", purpose).permutation(labels)


def from_plan_table(table: dict[str, Any], seed: int, dataset: str) -> DataShape:
    classes = int(table["classes"])
    return DataShape(train_labels=balanced_labels(int(table["train"]), classes, seed, "train"),
                     test_labels=balanced_labels(int(table["test"]), classes, seed, "test"),
                     classes=tuple(f"class {i}" for i in range(classes)), input=tuple(int(d) for d in table["input"]),
                     synthetic=True, source=f"[plan] table (dataset {dataset} not loaded; labels synthetic, balanced, "
                                            f"seeded by the run's seed)")


def from_loaded(train: Any, test: Any, dataset: str) -> DataShape:
    """The shape of a loaded dataset: its labels, class names and the shape of its first input."""
    first = train[0][0]
    shape = tuple(int(d) for d in torch.as_tensor(first).shape)
    labels = labels_of(train)
    names = getattr(train, "classes", None)
    count = int(getattr(train, "num_classes", 0) or (len(names) if names else int(labels.max()) + 1))
    classes = tuple(str(c) for c in names) if names else tuple(str(i) for i in range(count))
    test_labels = labels_of(test) if test is not None else np.zeros(0, dtype=np.int64)
    return DataShape(train_labels=labels, test_labels=test_labels, classes=classes, input=shape, synthetic=False,
                     source=f"dataset {dataset} (loaded: its labels and input shape)")


class MetaImages(ArrayDataset):
    """A dataset of meta-device inputs (no memory) whose labels are real: ``targets`` gives them on the CPU."""

    def __init__(self, labels: np.ndarray, input_shape: Sequence[int], classes: Sequence[str]) -> None:
        n = len(labels)
        super().__init__(torch.empty((n, *input_shape), device="meta"), torch.empty(n, dtype=torch.long, device="meta"),
                         classes)
        self._labels = torch.as_tensor(labels, dtype=torch.long)

    @property
    def targets(self) -> torch.Tensor:
        return self._labels


def meta_datasets(shape: DataShape) -> tuple[MetaImages, MetaImages | None]:
    """The dry run's training and test sets: meta inputs of the stated shape, the stated labels."""
    test = MetaImages(shape.test_labels, shape.input, shape.classes) if shape.test else None
    return MetaImages(shape.train_labels, shape.input, shape.classes), test


def noise_images(labels: np.ndarray, input_shape: Sequence[int], classes: Sequence[str], seed: int,
                 purpose: str) -> ArrayDataset:
    """Real inputs for a smoke run: seeded uniform noise in [0, 1) of the stated shape, the given labels."""
    gen = torch_generator(seed, "smoke-inputs", purpose)
    x = torch.rand((len(labels), *input_shape), generator=gen)
    return ArrayDataset(x, torch.as_tensor(labels, dtype=torch.long), list(classes))


def shape_of(p: Any) -> DataShape:
    """The data shape of a checked config (:class:`fedcore.experiment.build.Plan`): its ``[plan]`` table, or the
    real dataset when the table is absent (a missing file then says how to plan without it)."""
    from fedcore.experiment.build import load_data

    table = p.config.get("plan")
    if table is not None:
        return from_plan_table(table, p.config["seed"], p.dataset.name)
    try:
        train, test = load_data(p)
    except ConfigError as exc:
        raise ConfigError(f"{exc}; to plan without the data, state its shape in a [plan] table: train = N, "
                          f"test = N, classes = K, input = [C, H, W]") from None
    return from_loaded(train, test, p.dataset.name)


__all__ = ["DataShape", "MetaImages", "balanced_labels", "meta_datasets", "noise_images", "shape_of"]
