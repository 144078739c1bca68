"""How many updates a Byzantine-robust rule needs per aggregation, checked when the pipeline is built and again
on every aggregation.

Krum and Multi-Krum need ``n > 2f + 2`` (Blanchard et al., 2017, Prop. 1); Bulyan needs ``n ≥ 4f + 3``
(El Mhamdi et al., 2018, §4). When the schedule fixes the count at build time (FedAsync: one arrival per
aggregation; FedBuff: ``buffer_size``; semi-async with ``arrivals``), a pipeline that cannot meet the bound is
refused in one line before anything runs; otherwise (synchronous rounds, ``mu·N`` arrivals) the count is checked
at each aggregation.
"""
from __future__ import annotations

from typing import Any

from fedcore.builtin import AsyncSchedule, BufferedSchedule, SemiAsyncSchedule
from fedcore.errors import ConfigError


def updates_per_aggregation(schedule: Any) -> tuple[int, str] | None:
    """The number of updates each aggregation of ``schedule`` gets, and the setting that fixes it, if known now."""
    if isinstance(schedule, AsyncSchedule):
        return 1, "it aggregates every arrival alone"
    if isinstance(schedule, BufferedSchedule):
        return schedule.buffer_size, f"buffer_size={schedule.buffer_size}"
    if isinstance(schedule, SemiAsyncSchedule) and schedule.arrivals is not None:
        return schedule.arrivals, f"arrivals={schedule.arrivals}"
    return None


def refuse_schedule(component: str, f: int, need: int, bound: str, schedule: Any) -> None:
    """``ConfigError`` when ``schedule`` fixes fewer than ``need`` updates per aggregation."""
    known = updates_per_aggregation(schedule)
    if known is not None and known[0] < need:
        raise ConfigError(f"{component} with f={f} needs at least {need} updates per aggregation ({bound}); "
                          f"{type(schedule).__name__} gives {known[0]} ({known[1]}): use schedule = \"uniform\", or "
                          f"buffered with buffer_size >= {need}")


def refuse_count(component: str, f: int, need: int, bound: str, n: int) -> None:
    """``ConfigError`` when an aggregation got fewer than ``need`` updates."""
    if n < need:
        raise ConfigError(f"{component} with f={f} needs at least {need} updates per aggregation ({bound}); this "
                          f"aggregation has {n}: lower f or aggregate more clients at once")
