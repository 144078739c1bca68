"""``inner-dirichlet``: given client sizes, each client's labels drawn from its own Dir(alpha) class prior, as
Flower Datasets' ``InnerDirichletPartitioner`` (FedDyn, Acar et al. 2021)."""
from __future__ import annotations

import math
from typing import Any
import warnings

import attrs
import numpy as np

import fedcore
from fedcore.builtin.pathological import label_values
from fedcore.contexts import RunContext
from fedcore.errors import ConfigError
from fedcore.settings import setting
from fedcore.types import Partition


def _alpha(value: Any) -> float | tuple[float, ...]:
    if isinstance(value, (list, tuple)):
        values = tuple(value)
        if not values or not all(isinstance(v, (int, float)) and not isinstance(v, bool) and 0 < v < math.inf
                                 for v in values):
            raise ConfigError(f"InnerDirichletPartition.alpha={list(values)!r}; every value must be a finite "
                              f"number > 0")
        return tuple(float(v) for v in values)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < math.inf:
        raise ConfigError(f"InnerDirichletPartition.alpha={value!r}; must be a finite number > 0, or one per class")
    return float(value)


def _sizes(value: Any) -> tuple[int, ...] | None:
    if value is None:
        return None
    values = tuple(value) if isinstance(value, (list, tuple)) else (value,)
    if not values or not all(isinstance(v, int) and not isinstance(v, bool) and 0 <= v < 2**63 for v in values):
        raise ConfigError(f"InnerDirichletPartition.partition_sizes={value!r}; expected a list of sample counts >= 0")
    return tuple(int(v) for v in values)


@attrs.frozen(eq=False, kw_only=True)
class InnerDirichletPartition:
    """Client sizes are fixed (``partition_sizes``); the labels inside each client follow its own class prior
    ``p_i ~ Dir(alpha)``.

    Flower's algorithm, step for step: repeatedly pick a client that still has room (uniformly), draw a class
    from its prior, and give it that class's last unassigned sample; a class that runs out gets probability 0 in
    every prior (rows renormalised). Draws come from ``run.np_rng("partition")`` (Flower: ``seed=42``). With
    ``shuffle`` (Flower's ``FederatedDataset`` default) each class's samples are permuted first, else taken in
    dataset order. Flower requires ``partition_sizes`` and ``alpha``; fedcore defaults to near-equal sizes
    (``np.array_split``) and ``alpha = 0.5``. Sizes summing to less than the training set leave samples out
    (a warning, as in Flower); more is refused.
    """

    partition_sizes: tuple[int, ...] | None = attrs.field(
        default=None, converter=_sizes,
        metadata={"help": "samples per client, one per client (default: near-equal)", "optional": True})
    alpha: float | tuple[float, ...] = attrs.field(
        default=0.5, converter=_alpha,
        metadata={"help": "Dirichlet concentration: one number, or one per class; small = more skew"})
    shuffle: bool = setting(True, help="permute each class's samples (seeded) first; false: dataset order")
    partition_by: str | None = setting(None, kind=str, optional=True,
                                       help="a column to split by instead of the labels")

    @fedcore.hookimpl
    def fedcore_partition(self, dataset: Any, num_clients: int, test_dataset: Any, run: RunContext) -> Partition:
        labels = label_values(dataset, self.partition_by, "inner-dirichlet")
        n = len(labels)
        sizes = np.asarray(self.partition_sizes if self.partition_sizes is not None
                           else [len(p) for p in np.array_split(np.arange(n), num_clients)], dtype=np.int64)
        if len(sizes) != num_clients:
            raise ConfigError(f"inner-dirichlet: partition_sizes has {len(sizes)} entries; num_clients is "
                              f"{num_clients}: give one size per client")
        if sizes.sum() > n:
            raise ConfigError(f"inner-dirichlet: partition_sizes sum to {int(sizes.sum())}, more than the {n} "
                              f"training samples")
        if sizes.sum() < n:
            warnings.warn(f"inner-dirichlet: partition_sizes sum to {int(sizes.sum())} of {n} samples; the rest "
                          f"are held by no client", stacklevel=1)
        classes = np.unique(labels)
        alpha = np.full(len(classes), self.alpha) if isinstance(self.alpha, float) else np.asarray(self.alpha)
        if len(alpha) != len(classes):
            raise ConfigError(f"inner-dirichlet: alpha has {len(alpha)} values; the training set has "
                              f"{len(classes)} classes: give one number or one per class")
        rng = run.np_rng("partition")
        priors = rng.dirichlet(alpha, size=num_clients)
        by_class = [np.flatnonzero(labels == c) for c in classes]
        if self.shuffle:
            by_class = [rng.permutation(idx) for idx in by_class]
        return Partition(train=[np.sort(p) for p in draw(priors, by_class, sizes, rng)])


def draw(priors: np.ndarray, by_class: list[np.ndarray], sizes: np.ndarray, rng: np.random.Generator
         ) -> list[np.ndarray]:
    """Flower's sample-by-sample assignment (see the class docstring); ``priors`` is changed in place."""
    left_in_class = [len(idx) for idx in by_class]
    left = sizes.copy()
    parts = [np.zeros(int(s), dtype=np.int64) for s in sizes]
    open_clients = list(range(len(sizes)))
    while left.sum() != 0:
        client = int(rng.choice(open_clients))
        if left[client] == 0:
            open_clients.remove(client)
            continue
        left[client] -= 1
        while True:
            c = int(rng.choice(len(by_class), p=priors[client]))
            if left_in_class[c] == 0:  # the class ran out: no client draws it again
                priors[:, c] = 0.0
                rows = priors.sum(axis=1, keepdims=True)
                empty = rows[:, 0] == 0  # a prior whose classes all ran out: uniform over what is left
                priors[empty] = np.asarray(left_in_class, dtype=float) > 0
                priors /= priors.sum(axis=1, keepdims=True)
                continue
            left_in_class[c] -= 1
            parts[client][left[client]] = by_class[c][left_in_class[c]]
            break
    return parts
