"""``tl-vertical``: the partition of vertical Tree Learning, where every client holds every sample.

Clients differ in the features they hold (their width strip, cut by ``tl-share``), not in the samples
(thesis §3.6.1: "keeps the total amount of samples invariant"); the labels are the server's.
"""
from __future__ import annotations

from typing import Any

import attrs

import fedcore
from fedcore.settings import setting
from fedcore.types import Partition


@attrs.frozen(eq=False, kw_only=True)
class VerticalPartition:
    """Partition slot: the same sample ids for every client (a seeded ``fraction`` of the training set)."""

    fraction: float = setting(1.0, low=0.0, high=1.0, low_open=True, help="share of the training set used")

    @fedcore.hookimpl
    def fedcore_partition(self, dataset: Any, num_clients: int, test_dataset: Any, run: Any) -> Partition:
        n = max(1, round(self.fraction * len(dataset)))
        ids = sorted(int(i) for i in run.np_rng("partition").permutation(len(dataset))[:n])
        return Partition(train=[list(ids) for _ in range(num_clients)])
