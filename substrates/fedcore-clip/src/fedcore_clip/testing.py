"""Tiny random-initialised CLIP objects shared by the prompt substrate's tests and the prompt plugins' tests.

One frozen ``fedcore-tiny-clip`` backbone per process (:func:`tiny_backbone`), prompted models on it, the
colour-shape data the tests train on, and :func:`one_thread` for tiny models on a small shared machine.
Plugins' tests import only fedcore's public API, so these helpers live here rather than in ``tests/``.
"""
from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from functools import cache
from typing import Any

import torch

from fedcore.data import ArrayDataset
from fedcore.testing import ContractFixture, tiny_data
from fedcore_clip.backbone import FrozenCLIP, load_backbone
from fedcore_clip.captioned import shape_classnames, shape_images
from fedcore_clip.learner import PromptedCLIP, prompted_clip
from fedcore_clip.share import PromptShare


@contextmanager
def one_thread() -> Iterator[None]:
    """One intra-op torch thread inside the block: for tiny models on a shared 2-core machine it is many
    times faster (spec 003b §5.1). Use it in an autouse fixture: ``with one_thread(): yield``."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


@cache
def tiny_backbone(seed: int = 0) -> FrozenCLIP:
    """The random-initialised ``fedcore-tiny-clip``, built once per process and seed (it is frozen)."""
    return load_backbone("fedcore-tiny-clip", seed=seed)


def tiny_prompted(num_classes: int = 4, **kw: Any) -> PromptedCLIP:
    """A prompted tiny CLIP over ``class0 .. class{num_classes-1}`` (``n_ctx=4`` unless given)."""
    return prompted_clip(tiny_backbone(), [f"class{i}" for i in range(num_classes)], n_ctx=kw.pop("n_ctx", 4), **kw)


def shapes_data(n_train: int = 8, n_test: int = 3, classes: int = 6, *, stream: str = "t", noise: float = 0.2):
    """``(train, test)`` colour shapes of the first ``classes`` classes, ``n_train``/``n_test`` per class,
    drawn from the streams ``"{stream}-train"`` and ``"{stream}-test"`` (fresh tensors each call; the images are
    drawn once per process)."""
    classes = min(classes, len(shape_classnames()))
    names = shape_classnames()[:classes]
    out = []
    for n, split in ((n_train, "train"), (n_test, "test")):
        x, y = _shape_images(n, classes, f"{stream}-{split}", noise)
        out.append(ArrayDataset(torch.from_numpy(x.copy()), torch.from_numpy(y.copy()), names))
    return out[0], out[1]


@cache
def _shape_images(n_per_class: int, classes: int, stream: str, noise: float) -> tuple[Any, Any]:
    x, y = shape_images(n_per_class, classes, stream=stream, noise=noise)
    x.flags.writeable = y.flags.writeable = False
    return x, y


def shapes_prompted(classes: int = 6, **kw: Any) -> PromptedCLIP:
    """A prompted tiny CLIP over the first ``classes`` shape class names (``n_ctx=4`` unless given)."""
    return prompted_clip(tiny_backbone(), shapes_data(classes=classes)[0].classes, n_ctx=kw.pop("n_ctx", 4), **kw)


PROMPT_FIXTURE = ContractFixture(model_factory=tiny_prompted, data_factory=tiny_data, companions=(PromptShare(),))
"""Contract-check fixture: :func:`tiny_prompted` on :func:`fedcore.testing.tiny_data`, with the prompt share in the
split slot as every prompt recipe runs it: only the context crosses the network (under the whole-model split each
client would also copy, upload and average the frozen tower, 94 % of it the 49,408-row token table: 2.5x the run)."""

WHOLE_MODEL_PROMPT_FIXTURE = ContractFixture(model_factory=tiny_prompted, data_factory=tiny_data)
"""The same without a companion (the default whole-model split): :class:`PromptShare`'s own checks, and the prompt
update once under the whole-model split (the substrate's tests), a combination the framework also runs."""

__all__ = ["PROMPT_FIXTURE", "WHOLE_MODEL_PROMPT_FIXTURE", "one_thread", "shapes_data", "shapes_prompted",
           "tiny_backbone", "tiny_prompted"]
