"""Semi-asynchronous rounds (Co-S2P, Alg. 1): wait for μN arrivals, then T_clk more seconds.

Every idle client starts on the current model (no sampling). The server aggregates once at least
``ceil(μ·N)`` updates arrived (N = all clients, stale ones count) and a further ``t_clk`` virtual
seconds passed; whatever arrives before then is included. Stragglers keep working and arrive
stale in a later round. ``close_early`` stops waiting when nobody is busy (the paper waits).
"""
from __future__ import annotations

from collections.abc import Sequence
import math
from typing import Any, ClassVar

import attrs
import numpy as np

import fedcore
from fedcore.contexts import RunContext
from fedcore.errors import ConfigError
from fedcore.scheduling import SchedulerPolicy
from fedcore.settings import setting
from fedcore.types import ClientInfo, ClientUpdate


@attrs.define(kw_only=True)
class SemiAsyncRounds(SchedulerPolicy):
    """Policy state: how many arrivals to wait for, and the timeout once they are in."""

    need: int
    t_clk: float
    close_early: bool = False
    max_staleness: int | None = None
    deadline: float | None = None

    def dispatch(self, *, round: int, now: float, idle: Sequence[int], busy: Sequence[int],
                 rng: np.random.Generator) -> list[int]:
        self.deadline = None
        return sorted(idle)

    def ready(self, *, now: float, arrived: Sequence[ClientUpdate], busy: Sequence[int], since: float) -> bool | float:
        if len(arrived) < self.need:
            return False
        if self.deadline is None:
            self.deadline = now + self.t_clk
        if self.t_clk == 0 or (self.close_early and not busy):
            return True
        return self.deadline

    def accepts(self, update: ClientUpdate, *, version: int) -> bool:
        return self.max_staleness is None or version - update.version <= self.max_staleness

    def state_dict(self) -> dict[str, Any]:
        return {"deadline": self.deadline}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.deadline = state.get("deadline")


@attrs.frozen(eq=False, kw_only=True)
class SemiAsyncSchedule:
    """Co-S2P's semi-asynchronous schedule; ``mu=1/N, t_clk=0`` is its fully asynchronous variant."""

    asynchronous: ClassVar[bool] = True  # aggregates before all dispatched clients answered


    mu: float = setting(0.5, low=0.0, high=1.0, low_open=True, help="minimal received ratio μ (of all N clients)")
    t_clk: float = setting(0.0, low=0.0, help="T_clk: virtual seconds to keep accepting after μN arrivals")
    arrivals: int | None = setting(None, kind=int, low=1, optional=True, help="wait for this many instead of ceil(μN)")
    close_early: bool = setting(False, help="stop waiting when no client is busy")
    max_staleness: int | None = setting(None, kind=int, low=0, optional=True,
                                         help="drop updates staler than this (None = keep all)")

    @fedcore.hookimpl
    def fedcore_make_scheduler(self, clients: Sequence[ClientInfo], run: RunContext) -> SemiAsyncRounds:
        n = len(clients)
        need = self.arrivals if self.arrivals is not None else math.ceil(self.mu * n - 1e-9)
        if need > n:
            raise ConfigError(f"SemiAsyncSchedule.arrivals={need} waits for more arrivals than the {n} clients")
        return SemiAsyncRounds(need=max(1, need), t_clk=self.t_clk, close_early=self.close_early,
                               max_staleness=self.max_staleness)
