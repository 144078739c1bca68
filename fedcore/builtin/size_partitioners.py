"""``linear``, ``square``, ``exponential``: client sizes a fixed function of the client id, labels IID
(Flower Datasets' ``LinearPartitioner``, ``SquarePartitioner``, ``ExponentialPartitioner``).

The arithmetic is Flower's ``IdToSizeFncPartitioner``: ids run 1..M (M = ``num_clients``), client ``i`` gets
``f(i + 1)`` units, sizes are ``int(f(i + 1) / sum f * n)`` (truncated) and what truncation leaves over goes to
the last (largest) client. Flower cuts the sizes as consecutive index ranges of a dataset that
``FederatedDataset`` has shuffled (``shuffle=True, seed=42``); fedcore does the same with the run's seeded
stream (``run.np_rng("partition")``), and ``shuffle = false`` keeps the dataset order, giving Flower's
partitioner on an unshuffled dataset index for index.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

import attrs
import numpy as np

import fedcore
from fedcore.contexts import RunContext
from fedcore.errors import ConfigError
from fedcore.settings import setting
from fedcore.types import Partition


def id_to_size(num_clients: int, n: int, units: Callable[[np.ndarray], np.ndarray], name: str) -> np.ndarray:
    """Flower's sizes: ``units(1..M)`` normalised, times ``n``, truncated, the remainder to the last client."""
    weights = units(np.linspace(start=1, stop=num_clients, num=num_clients))
    sizes = np.array(weights / weights.sum() * n, dtype=np.int64)
    sizes[-1] += n - sizes.sum()
    if sizes.min() < 1:
        empty = int(np.argmin(sizes))
        raise ConfigError(f"{name}: with num_clients={num_clients} over {n} samples client {empty} gets "
                          f"{int(sizes[empty])} samples; lower num_clients")
    return sizes


def cut(sizes: np.ndarray, n: int, shuffle: bool, run: RunContext) -> Partition:
    order = run.np_rng("partition").permutation(n) if shuffle else np.arange(n)
    return Partition(train=[np.sort(part) for part in np.split(order, np.cumsum(sizes)[:-1])])


SHUFFLE_HELP = "cut the sizes from a seeded permutation (Flower's FederatedDataset default); false: dataset order"


@attrs.frozen(eq=False, kw_only=True)
class LinearPartition:
    """Client ``i`` holds a share proportional to ``i + 1`` (Flower's ``LinearPartitioner``)."""

    shuffle: bool = setting(True, help=SHUFFLE_HELP)

    @fedcore.hookimpl
    def fedcore_partition(self, dataset: Any, num_clients: int, test_dataset: Any, run: RunContext) -> Partition:
        n = len(dataset)
        return cut(id_to_size(num_clients, n, lambda ids: ids, "linear"), n, self.shuffle, run)


@attrs.frozen(eq=False, kw_only=True)
class SquarePartition:
    """Client ``i`` holds a share proportional to ``(i + 1)**2`` (Flower's ``SquarePartitioner``)."""

    shuffle: bool = setting(True, help=SHUFFLE_HELP)

    @fedcore.hookimpl
    def fedcore_partition(self, dataset: Any, num_clients: int, test_dataset: Any, run: RunContext) -> Partition:
        n = len(dataset)
        return cut(id_to_size(num_clients, n, np.square, "square"), n, self.shuffle, run)


@attrs.frozen(eq=False, kw_only=True)
class ExponentialPartition:
    """Client ``i`` holds a share proportional to ``e**(i + 1)`` (Flower's ``ExponentialPartitioner``); past a
    few dozen clients the first ones round to nothing, which is refused in one line."""

    shuffle: bool = setting(True, help=SHUFFLE_HELP)

    @fedcore.hookimpl
    def fedcore_partition(self, dataset: Any, num_clients: int, test_dataset: Any, run: RunContext) -> Partition:
        n = len(dataset)
        return cut(id_to_size(num_clients, n, np.exp, "exponential"), n, self.shuffle, run)
