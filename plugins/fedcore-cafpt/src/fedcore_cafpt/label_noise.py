"""Label noise as a config table: flip a fraction of the training labels before partitioning (thesis §6.5).

    [label_noise]
    rho = 0.3          # each training label is flipped, with probability rho, to a uniformly random other class

The flips are drawn from the run's seed (stream ``"label-noise"``), so seed s of a sweep re-draws the noise
with the pools, the prompt and the batches: a draw is a seed. They happen when the run is built, before the
partitioner sees the labels, so the pools are drawn from the noisy labels (as a client's own data would be);
the test set stays clean. ``rho = 0`` leaves every label as it is.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs
import numpy as np
import torch

from fedcore.errors import ConfigError
from fedcore.experiment import Key, Table
from fedcore.rng import numpy_generator
from fedcore.settings import build, setting


@attrs.frozen(eq=False, kw_only=True)
class LabelNoise:
    """Symmetric label noise: each label flipped with probability ``rho`` to another class, uniformly."""

    rho: float = setting(0.0, low=0.0, high=1.0, help="fraction of training labels flipped to a random other class")

    def flip(self, labels: torch.Tensor, num_classes: int, seed: int) -> torch.Tensor:
        """The noisy labels (a new tensor); the same seed gives the same flips."""
        rng = numpy_generator(seed, "label-noise")
        y = labels.clone()
        flip = rng.random(len(y)) < self.rho
        for i in np.flatnonzero(flip):
            y[i] = int((int(y[i]) + rng.integers(1, num_classes)) % num_classes)
        return y

    def apply(self, dataset: Any, seed: int) -> None:
        """Replace ``dataset.y`` by its noisy labels (a freshly loaded training set: the run's own copy)."""
        if not hasattr(dataset, "y") or not hasattr(dataset, "classes"):
            raise ConfigError(f"label_noise needs a training set with labels .y and .classes (an ArrayDataset); "
                              f"got {type(dataset).__name__}")
        if self.rho > 0:
            dataset.y = self.flip(dataset.y, len(dataset.classes), seed)


def _check(value: Mapping[str, Any], where: str) -> None:  # the config reader has checked that it is a table
    build(LabelNoise, dict(value), name=where)


def _build(value: Mapping[str, Any], context: Mapping[str, Any]) -> dict[str, Any]:
    build(LabelNoise, dict(value), name="label_noise").apply(context["train"], int(context["seed"]))
    return {}


LABEL_NOISE_TABLE = Table(
    key=Key(kind=(dict,), default=None, help="training labels flipped before partitioning: { rho = 0.3 } "
                                             "(fedcore_cafpt.LabelNoise; drawn from the run's seed)"),
    check=_check, build=_build, settings="fedcore_cafpt.label_noise:LabelNoise")
"""The ``[label_noise]`` config table (registered by the ``cafpt`` plugin)."""
