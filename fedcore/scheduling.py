"""The scheduling policy protocol that the schedule slot's factory returns.

The engine owns the loop and the (virtual) clock; a policy only answers three questions:
which idle clients to start now, whether to aggregate what has arrived, and whether an update
that arrives after the global model moved on still counts. Optional members, declared in the
protocol and no-ops in the base class :class:`SchedulerPolicy`: ``continuous = True`` makes the engine
call ``dispatch`` after every arrival too (FedBuff, FedAsync keep their concurrency),
``cancel(now=, busy=)`` names in-flight clients to give up when aggregating (a synchronous
deadline), ``state_dict()``/``load_state_dict()`` carry policy state through a checkpoint. Synchronous rounds,
deadlines, FedBuff, FedAsync and semi-asynchronous waiting (Co-S2P) are all policies of this shape.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol, runtime_checkable

import numpy as np

from fedcore.errors import ConfigError
from fedcore.types import ClientUpdate


@runtime_checkable
class Scheduler(Protocol):
    """What the engine drives: three questions every policy answers, four optional members.

    Subclass :class:`SchedulerPolicy` to get no-op defaults for the optional members; an object that
    does not subclass it still works (the engine adapts it once at set-up, see
    :func:`fedcore.engine.policies.adapt_scheduler`).
    """

    continuous: bool

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

    def cancel(self, *, now: float, busy: Sequence[int]) -> Sequence[int]:
        """In-flight clients to give up on when aggregating (a synchronous deadline); usually none."""

    def state_dict(self) -> dict[str, Any]:
        """What a checkpoint keeps of the policy (state carried across rounds)."""

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict` in a resumed run."""


class SchedulerPolicy:
    """Base class of scheduling policies: the optional members of :class:`Scheduler` as no-ops.

    Subclasses implement ``dispatch``, ``ready`` and ``accepts``; they override ``continuous``,
    ``cancel`` and ``state_dict``/``load_state_dict`` only when they need them.
    """

    continuous: bool = False
    """``True`` makes the engine call ``dispatch`` after every arrival too (FedBuff, FedAsync)."""

    def dispatch(self, *, round: int, now: float, idle: Sequence[int], busy: Sequence[int],
                 rng: np.random.Generator) -> Sequence[int]:
        raise NotImplementedError(f"{type(self).__name__} must implement dispatch()")

    def ready(self, *, now: float, arrived: Sequence[ClientUpdate], busy: Sequence[int],
              since: float) -> bool | float:
        raise NotImplementedError(f"{type(self).__name__} must implement ready()")

    def accepts(self, update: ClientUpdate, *, version: int) -> bool:
        raise NotImplementedError(f"{type(self).__name__} must implement accepts()")

    def cancel(self, *, now: float, busy: Sequence[int]) -> Sequence[int]:
        return ()

    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        pass


def sample_clients(ids: Sequence[int], fraction: float, min_clients: int, rng: np.random.Generator) -> list[int]:
    """``max(min_clients, round(fraction * len(ids)))`` clients drawn without replacement, in id order.

    Draws positions and indexes ``ids`` with them (the same draw as ``rng.choice(np.asarray(ids), ...)``,
    without listing ``ids``): O(k) for the engine's idle sequence, whatever the number of registered clients.
    """
    if not ids:
        return []
    k = max(min_clients, int(round(fraction * len(ids))))
    if k > len(ids):
        raise ConfigError(f"min_clients={min_clients} is more than the {len(ids)} clients available")
    return sorted(int(ids[int(i)]) for i in rng.choice(len(ids), size=k, replace=False))

def is_asynchronous(component: object) -> bool:
    """Whether a schedule component aggregates before every dispatched client has answered (updates may be stale).

    Schedule components declare it as a class attribute ``asynchronous: ClassVar[bool]`` (default: synchronous).
    """
    return bool(getattr(type(component), "asynchronous", False))


__all__ = ["Scheduler", "SchedulerPolicy", "is_asynchronous", "sample_clients"]
