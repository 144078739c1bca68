"""What FedAsync's and FedBuff's policies share: ``concurrency`` clients kept busy, refilled after every arrival.

:class:`ContinuousRounds` holds the common fields and ``dispatch``/``accepts``; each subclass says only
when the arrived updates are ``ready`` to aggregate.
"""
from __future__ import annotations

from collections.abc import Sequence

import attrs
import numpy as np

from fedcore.errors import ConfigError
from fedcore.scheduling import SchedulerPolicy
from fedcore.types import ClientInfo, ClientUpdate


def fill_to(concurrency: int, idle: Sequence[int], busy: Sequence[int], rng: np.random.Generator) -> list[int]:
    """Enough idle clients, drawn uniformly, to have ``concurrency`` busy; in id order.

    Draws positions in ``idle`` (the same draw as choosing from ``np.asarray(idle)``), so a refill costs
    O(k + busy), not O(registered clients).
    """
    k = min(max(0, concurrency - len(busy)), len(idle))
    if k == 0:
        return []
    return sorted(int(idle[int(i)]) for i in rng.choice(len(idle), size=k, replace=False))


def resolve_concurrency(owner: str, concurrency: int | None, clients: Sequence[ClientInfo]) -> int:
    n = len(clients)
    if concurrency is None:
        return n
    if concurrency > n:
        raise ConfigError(f"{owner}.concurrency={concurrency} is more than the {n} clients")
    return concurrency


@attrs.define(kw_only=True)
class ContinuousRounds(SchedulerPolicy):
    """Policy base: keep ``concurrency`` clients training; drop updates staler than ``max_staleness``."""

    concurrency: int
    max_staleness: int | None = None
    continuous = True  # the engine refills after every arrival, not only after aggregating

    def dispatch(self, *, round: int, now: float, idle: Sequence[int], busy: Sequence[int],
                 rng: np.random.Generator) -> list[int]:
        return fill_to(self.concurrency, idle, busy, rng)

    def accepts(self, update: ClientUpdate, *, version: int) -> bool:
        return self.max_staleness is None or version - update.version <= self.max_staleness
