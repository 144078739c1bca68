"""The engine's runtime state between aggregations: what a checkpoint of an asynchronous run must keep."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from fedcore.engine.state import EngineState

if TYPE_CHECKING:
    from fedcore.runtime.clock import ClockBase
    from fedcore.scheduling import SchedulerPolicy

__all__ = ["load_runtime_state", "runtime_state"]


def runtime_state(state: EngineState, scheduler: SchedulerPolicy | None, clock: ClockBase | None) -> dict[str, Any]:
    """Everything besides the server/client states and the history that a resumed run needs.

    Taken between aggregations (``arrived`` is then empty). ``in_flight`` holds finished jobs
    awaiting their virtual arrival (update tensors included); scheduler and clock states come
    from their ``state_dict()``. Values are plain Python, tensors and attrs records.
    """
    saved = state.state_dict()
    if scheduler is not None:
        saved["scheduler"] = scheduler.state_dict()
    if clock is not None:
        saved["clock"] = clock.state_dict()
    return saved


def load_runtime_state(state: EngineState, saved: dict[str, Any], scheduler: SchedulerPolicy | None,
                       clock: ClockBase | None) -> None:
    """Restore :func:`runtime_state` after set-up (the scheduler must exist)."""
    state.load_state_dict(saved)
    if "scheduler" in saved and scheduler is not None:
        scheduler.load_state_dict(saved["scheduler"])
    if "clock" in saved and clock is not None:
        clock.load_state_dict(saved["clock"])
