"""``pathological``: every client holds exactly ``num_classes_per_partition`` classes, as Flower Datasets'
``PathologicalPartitioner`` (Li et al., "Federated Learning on Non-IID Data Silos", 2022)."""
from __future__ import annotations

from typing import Any
import warnings

import attrs
import numpy as np

import fedcore
from fedcore.contexts import RunContext
from fedcore.data.arrays import column_of, labels_of
from fedcore.errors import ConfigError
from fedcore.settings import setting
from fedcore.types import Partition

MODES = ("random", "deterministic", "first-deterministic")


def label_values(dataset: Any, partition_by: str | None, who: str) -> np.ndarray:
    """The values a label-based partitioner splits by: the dataset's labels, or column ``partition_by``."""
    return labels_of(dataset) if partition_by is None else column_of(dataset, partition_by, who=who)


@attrs.frozen(eq=False, kw_only=True)
class PathologicalPartition:
    """Each client gets ``num_classes_per_partition`` classes; each class's samples are split evenly
    (``np.array_split``) among the clients holding it, in client order.

    ``class_assignment_mode`` is Flower's: ``random`` (k distinct classes per client), ``deterministic``
    (client ``i`` holds classes ``i, i+1, ..., i+k-1`` modulo the class count, over the sorted labels) or
    ``first-deterministic`` (class ``i`` modulo the count, the rest random; the paper's setup). Classes no client
    drew are left out, with a warning, as in Flower. Random draws come from ``run.np_rng("partition")``; with
    ``shuffle`` (Flower's ``FederatedDataset`` default) each class's samples are permuted before they are split,
    with ``shuffle = false`` they are split in dataset order, which with ``deterministic`` gives Flower's
    partitioner on an unshuffled dataset index for index. fedcore's ``shards`` is the older, deck-dealt variant
    that uses every class.
    """

    num_classes_per_partition: int = setting(2, low=1, help="classes each client holds (Flower requires it; "
                                                            "2 as in McMahan et al.)")
    class_assignment_mode: str = setting("random", choices=MODES, help="how classes are dealt to clients")
    shuffle: bool = setting(True, help="permute each class's samples (seeded) before splitting; false: dataset order")
    partition_by: str | None = setting(None, kind=str, optional=True,
                                       help="a column to split by instead of the labels")

    @fedcore.hookimpl
    def fedcore_partition(self, dataset: Any, num_clients: int, test_dataset: Any, run: RunContext) -> Partition:
        labels = label_values(dataset, self.partition_by, "pathological")
        classes = np.unique(labels)
        k = self.num_classes_per_partition
        if k > len(classes):
            raise ConfigError(f"pathological: num_classes_per_partition={k} exceeds the {len(classes)} classes")
        if num_clients > len(labels):
            raise ConfigError(f"pathological: num_clients={num_clients} exceeds the {len(labels)} samples")
        rng = run.np_rng("partition")
        held = [self._classes_of(client, classes, rng) for client in range(num_clients)]
        holders = {c: [i for i, mine in enumerate(held) if c in mine] for c in classes.tolist()}
        parts: list[list[int]] = [[] for _ in range(num_clients)]
        unused = []
        for c in classes.tolist():
            idx = np.flatnonzero(labels == c)
            if not holders[c]:
                unused.append(c)
                continue
            if len(holders[c]) > len(idx):
                raise ConfigError(f"pathological: class {c!r} is held by {len(holders[c])} clients but has "
                                  f"{len(idx)} samples; lower num_clients or num_classes_per_partition, or use "
                                  f"class_assignment_mode='deterministic'")
            if self.shuffle:
                idx = rng.permutation(idx)
            for client, chunk in zip(holders[c], np.array_split(idx, len(holders[c]))):
                parts[client].extend(chunk.tolist())
        if unused:
            warnings.warn(f"pathological: classes {unused} are held by no client (class_assignment_mode="
                          f"{self.class_assignment_mode!r}); 'first-deterministic' uses every class when "
                          f"num_clients >= the class count", stacklevel=1)
        return Partition(train=[sorted(p) for p in parts])

    def _classes_of(self, client: int, classes: np.ndarray, rng: np.random.Generator) -> list[Any]:
        k, count = self.num_classes_per_partition, len(classes)
        if self.class_assignment_mode == "deterministic":
            return [classes[(client + i) % count].item() for i in range(k)]
        if self.class_assignment_mode == "random":
            return rng.choice(classes, size=k, replace=False).tolist()
        mine = [classes[client % count].item()]
        while len(mine) < k:
            c = rng.choice(classes).item()
            if c not in mine:
                mine.append(c)
        return mine
