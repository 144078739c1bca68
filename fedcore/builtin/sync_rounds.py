"""Synchronous rounds with uniform client sampling (FedAvg's schedule), optionally with a deadline.

With ``deadline`` (virtual seconds, needs a clock) the server aggregates whatever arrived by the
deadline and cancels the stragglers (they become idle and their work is discarded), as in
deadline-based FedAvg (Bonawitz et al., 2019; FedScale's straggler setting).
"""
from __future__ import annotations

from collections.abc import Sequence

import attrs
import numpy as np

import fedcore
from fedcore.contexts import RunContext
from fedcore.errors import ConfigError
from fedcore.scheduling import SchedulerPolicy, sample_clients
from fedcore.settings import setting
from fedcore.types import ClientInfo, ClientUpdate


@attrs.define(kw_only=True)
class SyncRounds(SchedulerPolicy):
    """Policy: sample clients when nobody is busy, aggregate once all of them arrived; late updates do not count."""

    fraction: float
    min_clients: int
    deadline: float | None = None

    def dispatch(self, *, round: int, now: float, idle: Sequence[int], busy: Sequence[int],
                 rng: np.random.Generator) -> list[int]:
        return [] if busy else sample_clients(idle, self.fraction, self.min_clients, rng)

    def ready(self, *, now: float, arrived: Sequence[ClientUpdate], busy: Sequence[int], since: float) -> bool | float:
        if not busy:
            return True
        return False if self.deadline is None else since + self.deadline

    def cancel(self, *, now: float, busy: Sequence[int]) -> list[int]:
        """At aggregation, the stragglers still running past the deadline are given up."""
        return list(busy) if self.deadline is not None else []

    def accepts(self, update: ClientUpdate, *, version: int) -> bool:
        return False


@attrs.frozen(eq=False, kw_only=True)
class UniformSync:
    """Each round, ``max(min_clients, round(fraction·N))`` clients drawn uniformly without replacement."""

    fraction: float = setting(1.0, low=0.0, high=1.0, low_open=True, help="participation fraction per round")
    min_clients: int = setting(1, low=1, help="fewest updates a round aggregates")
    deadline: float | None = setting(None, kind=float, low=0.0, low_open=True, optional=True,
                                     help="virtual seconds per round; stragglers past it are dropped")

    @fedcore.hookimpl
    def fedcore_make_scheduler(self, clients: Sequence[ClientInfo], run: RunContext) -> SyncRounds:
        if self.min_clients > len(clients):
            raise ConfigError(f"UniformSync.min_clients={self.min_clients} is more than the {len(clients)} clients")
        return SyncRounds(fraction=self.fraction, min_clients=self.min_clients, deadline=self.deadline)
