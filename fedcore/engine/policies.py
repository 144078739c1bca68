"""Adapting the scheduler policy and the clock once at set-up, so the engine calls them without probing.

A policy or clock that subclasses :class:`fedcore.scheduling.SchedulerPolicy` or
:class:`fedcore.runtime.ClockBase` is used as it is. Any other object (a third-party policy written
against the protocol, with only the members it needs) is wrapped once: its own members are used,
the missing optional ones become the bases' no-ops.
"""
from __future__ import annotations

from typing import Any

from fedcore.errors import ConfigError
from fedcore.runtime.clock import ClockBase
from fedcore.scheduling import SchedulerPolicy

_REQUIRED_SCHEDULER = ("dispatch", "ready", "accepts")


class AdaptedScheduler(SchedulerPolicy):
    """A policy that does not subclass :class:`SchedulerPolicy`, with the base's defaults for what it lacks."""

    def __init__(self, policy: Any) -> None:
        self.policy = policy
        self.continuous = bool(getattr(policy, "continuous", False))
        for name in ("dispatch", "ready", "accepts", "cancel", "state_dict", "load_state_dict"):
            own = getattr(policy, name, None)
            if callable(own):
                setattr(self, name, own)


class AdaptedClock(ClockBase):
    """A clock that does not subclass :class:`ClockBase`, with the base's no-ops for what it lacks."""

    def __init__(self, clock: Any) -> None:
        self.clock = clock
        for name in ("duration", "duration_at_dispatch", "bind", "admit", "availability", "collect", "state_dict",
                     "load_state_dict"):
            own = getattr(clock, name, None)
            if callable(own):
                setattr(self, name, own)


def adapt_scheduler(policy: Any) -> SchedulerPolicy:
    if isinstance(policy, SchedulerPolicy):
        return policy
    missing = [m for m in _REQUIRED_SCHEDULER if not callable(getattr(policy, m, None))]
    if missing:
        raise ConfigError(f"the scheduler policy {type(policy).__name__} lacks {', '.join(missing)}(); a policy "
                          f"needs dispatch, ready and accepts (subclass fedcore.scheduling.SchedulerPolicy)")
    return AdaptedScheduler(policy)


def adapt_clock(clock: Any) -> ClockBase | None:
    if clock is None or isinstance(clock, ClockBase):
        return clock
    if not callable(getattr(clock, "duration", None)):
        raise ConfigError(f"clock={type(clock).__name__} has no duration(client, result, share=, round=) method "
                          f"(subclass fedcore.runtime.ClockBase)")
    return AdaptedClock(clock)
