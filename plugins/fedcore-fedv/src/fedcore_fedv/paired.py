"""Paired test splits: each client's test split follows its training label distribution (FedV App. 0.A.1).

A wrapper around whichever partitioner fills the slot (``dirichlet``, ``shards``, ...): it keeps the
training split and deals each class's test samples to the clients in proportion to how many training
samples of that class they hold (largest remainder), so test splits are disjoint and "the distribution
of the test datasets is the same as in training datasets".
"""
from __future__ import annotations

from typing import Any

import attrs
import numpy as np

import fedcore
from fedcore.data import labels_of
from fedcore.types import Partition


def paired_test(train_parts: tuple[tuple[int, ...], ...], train_labels: np.ndarray, test_labels: np.ndarray,
                rng: np.random.Generator) -> list[list[int]]:
    """Test indices per client, proportional per class to the client's training counts."""
    n_clients = len(train_parts)
    out: list[list[int]] = [[] for _ in range(n_clients)]
    for c in np.unique(test_labels):
        counts = np.array([int(np.sum(train_labels[list(p)] == c)) if p else 0 for p in train_parts], dtype=float)
        if counts.sum() == 0:
            continue
        idx = rng.permutation(np.flatnonzero(test_labels == c))
        quota = counts / counts.sum() * len(idx)
        take = np.floor(quota).astype(int)
        for k in np.argsort(-(quota - take))[: len(idx) - take.sum()]:
            take[k] += 1
        for client, chunk in enumerate(np.split(idx, np.cumsum(take)[:-1])):
            out[client].extend(int(i) for i in chunk)
    return [sorted(p) for p in out]


@attrs.frozen(eq=False, kw_only=True)
class PairedTest:
    """Wraps the partition slot: adds per-client test splits with each client's training label distribution."""

    @fedcore.hookimpl(wrapper=True)
    def fedcore_partition(self, dataset: Any, num_clients: int, test_dataset: Any, run: Any):
        part = yield
        if test_dataset is None:
            return part
        test = paired_test(part.train, labels_of(dataset), labels_of(test_dataset), run.np_rng("paired-test"))
        return Partition(train=part.train, test=test, pool=part.pool)
