"""The p-group partitioner of Fang et al. (FedVKD Sec. 4.1): non-IID by a single knob ``p``.

Clients are dealt evenly to ``num_groups`` groups at random; classes map to groups (contiguous blocks by
default). A sample whose class belongs to group l goes to group l with probability ``p`` and to each other
group with probability ``(1-p)/(M-1)``, then to a uniformly chosen client of that group. ``p = 1/M`` is
IID; larger ``p`` concentrates each group's classes on its clients.
"""
from __future__ import annotations

from typing import Any

import attrs
import numpy as np

import fedcore
from fedcore import ConfigError, Partition, RunContext
from fedcore.data import labels_of
from fedcore.settings import setting


def class_to_group(num_classes: int, num_groups: int, mapping: str = "contiguous",
                   rng: np.random.Generator | None = None) -> np.ndarray:
    """Group of each class: contiguous blocks ``class * M // C`` or a random balanced map."""
    if num_groups > num_classes:
        raise ConfigError(f"p-group: num_groups={num_groups} is more than the {num_classes} classes; "
                          f"use num_groups <= {num_classes}")
    groups = np.arange(num_classes) * num_groups // num_classes
    if mapping == "random":
        groups = (rng or np.random.default_rng(0)).permutation(groups)
    return groups


def deal(group: np.ndarray, members: list[np.ndarray], rng: np.random.Generator) -> list[list[int]]:
    """Each sample to a uniformly drawn client of its group, in sample order. One array draw of the bounds
    ``len(members[group[i]])`` takes the generator's values a draw per sample would (a group of one client draws
    nothing either way), without a Python loop over a million samples."""
    sizes = np.array([len(m) for m in members])
    offsets = np.concatenate([[0], np.cumsum(sizes)[:-1]])
    flat = np.concatenate(members)
    client = flat[offsets[group] + rng.integers(0, sizes[group])]
    order = np.argsort(client, kind="stable")
    counts = np.bincount(client, minlength=len(flat))
    return [part.tolist() for part in np.split(order, np.cumsum(counts)[:-1])]


@attrs.frozen(eq=False, kw_only=True)
class PGroupPartition:
    """Partition slot: Fang et al.'s p-group split (FedVKD: p = 0.1 IID, p = 0.2 non-IID, 10 groups)."""

    p: float = setting(0.1, low=0.0, high=1.0, low_open=True, help="probability a sample stays in its class's group")
    num_groups: int = setting(10, low=1, help="M groups of clients (and of classes)")
    class_map: str = setting("contiguous", choices=("contiguous", "random"), help="class -> group map")

    @classmethod
    def __fedcore_checks__(cls):  # type: ignore[no-untyped-def]
        from fedcore.testing import CheckPlan

        return CheckPlan(presets=[cls(p=0.5, num_groups=3)])  # the check fixture has 3 clients, 4 classes

    @fedcore.hookimpl
    def fedcore_partition(self, dataset: Any, num_clients: int, test_dataset: Any, run: RunContext) -> Partition:
        labels = labels_of(dataset)
        num_classes = int(labels.max()) + 1
        if num_clients < self.num_groups:
            raise ConfigError(f"p-group: num_clients={num_clients} is fewer than num_groups={self.num_groups}; "
                              f"every group needs a client")
        rng = run.np_rng("partition")
        group_of_class = class_to_group(num_classes, self.num_groups, self.class_map, rng)
        client_group = rng.permutation(np.arange(num_clients) % self.num_groups)
        members = [np.flatnonzero(client_group == g) for g in range(self.num_groups)]
        home = group_of_class[labels]
        m = self.num_groups
        stay = rng.random(len(labels)) < self.p
        other = (home + 1 + rng.integers(0, max(m - 1, 1), size=len(labels))) % m if m > 1 else home
        group = np.where(stay, home, other)
        parts = deal(group, members, rng)
        empty = [c for c, part in enumerate(parts) if not part]
        if empty:
            raise ConfigError(f"p-group: clients {empty} received no sample; use more data or fewer clients")
        return Partition(train=parts)
