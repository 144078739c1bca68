"""Captioned image sets for pre-training fedcore's tiny CLIP and for the prompt-learning experiments.

* ``shapes``: procedurally drawn 16x16 RGB images of 6 colours x 5 shapes = 30 classes ("red circle", ...),
  random position, size, background and pixel noise, deterministic by seed. The pre-training images
  and the downstream images come from different streams, and the downstream domain is shifted (more
  pixel noise, brighter random backgrounds), so zero-shot transfer is imperfect and prompts have room.
* ``digits``: scikit-learn's embedded 8x8 digits with captions "a photo of the digit three."; the
  pre-training half of the train split is clean, the downstream half and the test split get noise.
"""
from __future__ import annotations

import numpy as np
import torch

from fedcore.data import ArrayDataset
from fedcore.rng import numpy_generator

COLOURS = {"red": (0.9, 0.1, 0.1), "green": (0.1, 0.8, 0.2), "blue": (0.15, 0.25, 0.95),
           "yellow": (0.95, 0.9, 0.1), "purple": (0.6, 0.1, 0.8), "cyan": (0.1, 0.85, 0.9)}
SHAPES = ("circle", "square", "triangle", "cross", "ring")
DIGIT_NAMES = ("zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine")
TEMPLATES = {
    "shapes": ("a photo of a {}.", "a {} shape.", "a picture of a {}.", "an image of a {}."),
    "digits": ("a photo of the digit {}.", "the number {}.", "a handwritten {}.", "an image of the digit {}."),
}
DATASETS = ("shapes", "digits")


def shape_classnames() -> list[str]:
    return [f"{c} {s}" for c in COLOURS for s in SHAPES]


def _mask(shape: str, dx: np.ndarray, dy: np.ndarray, r: float) -> np.ndarray:
    dist2 = dx ** 2 + dy ** 2
    if shape == "circle":
        return dist2 <= r ** 2
    if shape == "square":
        return np.maximum(abs(dx), abs(dy)) <= 0.8 * r
    if shape == "triangle":
        return (dy >= -r) & (dy <= 0.8 * r) & (abs(dx) <= (dy + r) / 2)
    if shape == "cross":
        return ((abs(dx) <= r / 3) & (abs(dy) <= r)) | ((abs(dy) <= r / 3) & (abs(dx) <= r))
    return (dist2 <= r ** 2) & (dist2 >= (0.55 * r) ** 2)  # ring


def shapes_dataset(n_per_class: int, *, seed: int = 0, stream: str = "downstream", noise: float = 0.1,
                   background: float = 0.3, size: int = 16) -> ArrayDataset:
    """``n_per_class`` images of every colour-shape class; ``background`` is the max background brightness."""
    names = shape_classnames()
    x, y = shape_images(n_per_class, len(names), seed=seed, stream=stream, noise=noise, background=background,
                        size=size)
    return ArrayDataset(torch.from_numpy(x), torch.as_tensor(y), names)


def shape_images(n_per_class: int, classes: int, *, seed: int = 0, stream: str = "downstream", noise: float = 0.1,
                 background: float = 0.3, size: int = 16) -> tuple[np.ndarray, np.ndarray]:
    """The images and labels of :func:`shapes_dataset`'s first ``classes`` classes (the classes are drawn one after
    the other from one stream, so the first ones do not depend on how many follow)."""
    rng = numpy_generator(seed, "shapes", stream)
    colours = list(COLOURS.values())
    yy, xx = np.mgrid[0:size, 0:size].astype(np.float32)
    xs, ys = [], []
    for label in range(classes):
        colour = np.asarray(colours[label // len(SHAPES)], dtype=np.float32)
        shape = SHAPES[label % len(SHAPES)]
        for _ in range(n_per_class):
            cx, cy = rng.uniform(0.3 * size, 0.7 * size, 2)
            r = rng.uniform(0.2 * size, 0.32 * size)
            m = _mask(shape, xx - cx, yy - cy, r)
            bg = rng.uniform(0.0, background, 3).astype(np.float32)
            img = np.broadcast_to(bg[:, None, None], (3, size, size)).copy()
            tint = np.clip(colour + rng.normal(0, 0.05, 3), 0, 1).astype(np.float32)
            img[:, m] = tint[:, None]
            img += rng.normal(0, noise, img.shape).astype(np.float32)
            xs.append(np.clip(img, 0, 1))
            ys.append(label)
    return np.stack(xs), np.asarray(ys, dtype=np.int64)


def digits_datasets(*, seed: int = 0, noise: float = 0.25) -> tuple[ArrayDataset, ArrayDataset, ArrayDataset]:
    """(pretrain, downstream train, downstream test) of the embedded digits, named "zero".."nine"."""
    from fedcore.data import load_digits

    train, test = load_digits(seed=seed)
    rng = numpy_generator(seed, "digits-split")
    perm = torch.as_tensor(rng.permutation(len(train)))
    half = len(train) // 2
    g = torch.Generator().manual_seed(seed)

    def noisy(ds: ArrayDataset) -> ArrayDataset:
        x = (ds.x + noise * torch.randn(ds.x.shape, generator=g)).clamp(0, 1)
        return ArrayDataset(x, ds.y, list(DIGIT_NAMES))

    pre = train.subset(perm[:half].tolist())
    return (ArrayDataset(pre.x, pre.y, list(DIGIT_NAMES)), noisy(train.subset(perm[half:].tolist())), noisy(test))


def pretraining_set(dataset: str = "shapes", *, seed: int = 0, n_per_class: int = 200) -> ArrayDataset:
    if dataset == "shapes":
        return shapes_dataset(n_per_class, seed=seed, stream="pretrain", noise=0.08, background=0.25)
    if dataset == "digits":
        return digits_datasets(seed=seed)[0]
    raise ValueError(f"dataset={dataset!r}; choose one of: {', '.join(DATASETS)}")


def downstream(dataset: str = "shapes", *, seed: int = 0, n_train_per_class: int = 60, n_test_per_class: int = 20,
               noise: float = 0.2, background: float = 0.4) -> tuple[ArrayDataset, ArrayDataset]:
    """The shifted downstream task: (train, test), disjoint from the pre-training images."""
    if dataset == "shapes":
        return (shapes_dataset(n_train_per_class, seed=seed, stream="downstream-train", noise=noise,
                               background=background),
                shapes_dataset(n_test_per_class, seed=seed, stream="downstream-test", noise=noise,
                               background=background))
    if dataset == "digits":
        _, train, test = digits_datasets(seed=seed, noise=noise)
        return train, test
    raise ValueError(f"dataset={dataset!r}; choose one of: {', '.join(DATASETS)}")


def captions(dataset: str, classnames: list[str]) -> tuple[list[list[str]], tuple[str, ...]]:
    """Per class, its captions (one per template)."""
    templates = TEMPLATES[dataset]
    return [[t.format(name) for t in templates] for name in classnames], templates
