"""The engine's runtime state between aggregations: what a checkpoint of an asynchronous run must keep."""
from __future__ import annotations

import heapq
from typing import TYPE_CHECKING, Any

import attrs

from fedcore.engine.arrivals import InFlight

if TYPE_CHECKING:
    from fedcore.engine.loop import Engine


def runtime_state(engine: Engine) -> dict[str, Any]:
    """Everything besides the server/client states and the history that a resumed run needs.

    Taken between aggregations (``arrived`` is then empty). ``in_flight`` holds finished jobs
    awaiting their virtual arrival (update tensors included); scheduler and clock states come
    from their ``state_dict()``. Values are plain Python, tensors and attrs records.
    """
    engine.pending.collect_all()  # a checkpoint holds finished jobs only
    state: dict[str, Any] = {
        "now": engine.now, "since": engine.since, "ledger_mark": engine.ledger_mark,
        "busy_s": dict(engine.busy_s),
        "in_flight": [attrs.asdict(item, recurse=False) for _, _, item in engine.in_flight],
    }
    if engine._scheduler is not None:
        state["scheduler"] = engine._scheduler.state_dict()
    if engine.clock is not None:
        state["clock"] = engine.clock.state_dict()
    return state


def load_runtime_state(engine: Engine, state: dict[str, Any]) -> None:
    """Restore :func:`runtime_state` after set-up (the scheduler must exist)."""
    engine.now, engine.since = float(state["now"]), float(state["since"])
    engine.ledger_mark = int(state["ledger_mark"])
    engine.busy_s = {int(k): float(v) for k, v in state["busy_s"].items()}
    items = [InFlight(**d) for d in state["in_flight"]]
    engine.in_flight = [(i.arrival, i.client_id, i) for i in items]
    heapq.heapify(engine.in_flight)
    if "scheduler" in state and engine._scheduler is not None:
        engine._scheduler.load_state_dict(state["scheduler"])
    if "clock" in state and engine.clock is not None:
        engine.clock.load_state_dict(state["clock"])
