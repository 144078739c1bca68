"""The scheduling policy protocol that the schedule slot's factory returns.

The engine owns the loop and the (virtual) clock; a policy only answers three questions:
which idle clients to start now, whether to aggregate what has arrived, and whether an update
that arrives after the global model moved on still counts. Two optional members: ``continuous =
True`` makes the engine call ``dispatch`` after every arrival too (FedBuff, FedAsync keep their
concurrency), and ``cancel(now=, busy=)`` names in-flight clients to give up when aggregating (a
synchronous deadline). Synchronous rounds, deadlines, FedBuff,
FedAsync and semi-asynchronous waiting (Co-S2P) are all policies of this shape.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, runtime_checkable

import numpy as np

from fedcore.errors import ConfigError
from fedcore.types import ClientUpdate


@runtime_checkable
class Scheduler(Protocol):
    def dispatch(self, *, round: int, now: float, idle: Sequence[int], busy: Sequence[int],
                 rng: np.random.Generator) -> Sequence[int]:
        """Client ids (a subset of ``idle``) to start now on the current global model; may be empty."""

    def ready(self, *, now: float, arrived: Sequence[ClientUpdate], busy: Sequence[int],
              since: float) -> bool | float:
        """``True``: aggregate ``arrived`` now. ``False``: wait for the next arrival.

        A float is a virtual time: aggregate then, unless a later call says ``True`` first.
        ``since`` is the virtual time of the last aggregation (or of the start).
        """

    def accepts(self, update: ClientUpdate, *, version: int) -> bool:
        """Whether an update started on an older global version (``update.version < version``) counts."""


def sample_clients(ids: Sequence[int], fraction: float, min_clients: int, rng: np.random.Generator) -> list[int]:
    """``max(min_clients, round(fraction * len(ids)))`` clients drawn without replacement, in id order."""
    if not ids:
        return []
    k = max(min_clients, int(round(fraction * len(ids))))
    if k > len(ids):
        raise ConfigError(f"min_clients={min_clients} is more than the {len(ids)} clients available")
    chosen = rng.choice(np.asarray(ids), size=k, replace=False)
    return sorted(int(c) for c in chosen)
