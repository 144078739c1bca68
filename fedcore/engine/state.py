"""The engine's runtime state, and the only code that changes it.

One record holds what a run carries between and within rounds: virtual time (``now``, and ``since``,
the time of the last aggregation), the jobs in flight (a heap by virtual arrival), the updates that
arrived this round with their durations, what happened to clients (``events``), per-client busy time,
the ledger mark of the last aggregation, the starts per client on one version, and the jobs a parallel
executor has not finished yet. :mod:`~fedcore.engine.dispatch`, :mod:`~fedcore.engine.arrivals` and
:mod:`~fedcore.engine.record` change it only through the operations here (``admit``, ``pop_arrival``,
``arrive``, ``note``, ``cancel``, ``close_round``, ...); :mod:`~fedcore.engine.snapshot` serialises it
with ``state_dict()``. The engine's collaborators (hooks, run context, policy, clock, executor) travel
beside it as one frozen :class:`EngineParts` record, so no module reaches into the engine.
"""
from __future__ import annotations

from collections.abc import Callable
import heapq
from typing import TYPE_CHECKING, Any

import attrs

from fedcore.engine.pending import PendingJobs
from fedcore.types import ClientUpdate

if TYPE_CHECKING:
    from fedcore.contexts import RunContext
    from fedcore.pipeline import Hooks, Pipeline
    from fedcore.runtime.clock import ClockBase
    from fedcore.runtime.faults import Faults
    from fedcore.runtime.placement import Placement
    from fedcore.scheduling import SchedulerPolicy

__all__ = ["EVENT_KEYS", "ClosedRound", "EngineParts", "EngineState", "InFlight"]

EVENT_KEYS = ("failed", "rejected", "dropped", "share_changed", "cancelled", "unavailable", "dropout", "lost")
"""History-row keys for what happened to clients in a round (present only when non-empty)."""


@attrs.define(kw_only=True, eq=False)
class InFlight:
    """A dispatched job the server has not heard back from yet.

    Jobs run eagerly at dispatch, so this holds the finished result until its virtual arrival.
    It is what a checkpoint of an asynchronous run must keep (see :meth:`EngineState.state_dict`):
    plain values and the update's tensors, no module. ``outcome`` is ``"ok"``, ``"lost"`` (the
    upload was sent but never reached the server) or ``"dropout"`` (the client vanished mid-round;
    ``arrival`` is when the server notices).
    """

    arrival: float
    client_id: int
    dispatched_at: float
    version: int
    outcome: str = "ok"
    update: ClientUpdate | None = None
    error: str | None = None
    upload: tuple[str, ...] = ()
    rows: tuple[dict[str, Any], ...] = ()  # the job's transfers not booked at dispatch, booked on arrival

    def finish(self, update: ClientUpdate | None, error: str | None, rows: tuple[dict[str, Any], ...]) -> None:
        """Fill in the job's result (at dispatch, or when a parallel executor's job is collected)."""
        self.update, self.error, self.rows = update, error, rows


@attrs.frozen(kw_only=True, eq=False)
class EngineParts:
    """The engine's collaborators, fixed at set-up: what dispatch, arrivals and record call, never change."""

    pipeline: Pipeline
    hooks: Hooks
    run: RunContext
    scheduler: SchedulerPolicy
    clock: ClockBase | None
    faults: Faults | None
    placement: Placement
    executor: Any
    submit: Callable[[Any], list[Any]] | None  # a parallel executor's submit(jobs) -> handles, or None
    eval_every: int
    client_metrics: bool = False  # rows carry every aggregated update's metrics (RunSpec.client_metrics)
    update_norm_bound: float = 0.0  # reject an update this many times the round's median change (update_norms.py)


@attrs.frozen(kw_only=True, eq=False)
class ClosedRound:
    """What one round gathered, handed to aggregation by :meth:`EngineState.close_round`."""

    arrived: list[ClientUpdate]
    events: dict[str, list[Any]]
    arrival_times: dict[int, float]  # seconds from dispatch to arrival, by position in ``arrived``
    ledger_mark: int  # the ledger's length at the previous aggregation


def _no_events() -> dict[str, list[Any]]:
    return {k: [] for k in EVENT_KEYS}


@attrs.define(kw_only=True, eq=False)
class EngineState:
    """The runtime state of one run (see the module docstring); change it through its methods."""

    num_clients: int
    now: float = 0.0
    since: float = 0.0
    ledger_mark: int = 0
    in_flight: list[tuple[float, int, InFlight]] = attrs.field(factory=list)
    arrived: list[ClientUpdate] = attrs.field(factory=list)
    arrival_times: dict[int, float] = attrs.field(factory=dict)
    events: dict[str, list[Any]] = attrs.field(factory=_no_events)
    busy_s: dict[int, float] = attrs.field()
    pending: PendingJobs = attrs.field(factory=PendingJobs)  # jobs submitted to a parallel executor
    wave_round: int = -1  # the round the dispatch counters below belong to
    wave_calls: int = 0  # dispatch calls in that round (continuous policies dispatch after every arrival)
    starts: dict[int, int] = attrs.field(factory=dict)  # starts per client on one version

    @busy_s.default
    def _idle(self) -> dict[int, float]:
        return {c: 0.0 for c in range(self.num_clients)}

    # -- dispatch ----------------------------------------------------------------------------

    def busy_ids(self) -> list[int]:
        return sorted(c for _, c, _ in self.in_flight)

    def next_wave(self, round: int) -> int:
        """Count a dispatch call of ``round``; returns how many calls that round had before this one."""
        if self.wave_round != round:
            self.wave_round, self.wave_calls, self.starts = round, 0, {}
        calls = self.wave_calls
        self.wave_calls += 1
        return calls

    def start(self, client_id: int) -> int:
        """Count a start of the client on this version; returns how often it was started before."""
        k = self.starts.get(client_id, 0)
        self.starts[client_id] = k + 1
        return k

    def admit(self, item: InFlight) -> None:
        """A dispatched job is now in flight until its virtual arrival."""
        heapq.heappush(self.in_flight, (item.arrival, item.client_id, item))

    # -- arrivals ----------------------------------------------------------------------------

    def next_arrival(self) -> float | None:
        return self.in_flight[0][0] if self.in_flight else None

    def advance(self, to: float) -> None:
        """Move virtual time forward to ``to`` (never back)."""
        self.now = max(self.now, to)

    def elapse(self, seconds: float) -> None:
        """Let ``seconds`` of virtual time pass on the server (work between arrivals, such as an aggregation's)."""
        self.now += max(0.0, float(seconds))

    def pop_arrival(self) -> InFlight:
        """The next job to arrive; virtual time moves to its arrival and its busy time is counted."""
        _, _, item = heapq.heappop(self.in_flight)
        self.advance(item.arrival)
        self.pending.collect(item.client_id)  # a job submitted to a parallel executor: wait for it now, only it
        self.busy_s[item.client_id] += item.arrival - item.dispatched_at
        return item

    def arrive(self, update: ClientUpdate, seconds: float) -> None:
        """An update reached the server and waits for aggregation; ``seconds`` from its dispatch."""
        self.arrival_times[len(self.arrived)] = seconds  # keyed by position: a client may repeat
        self.arrived.append(update)

    def note(self, event: str, value: Any) -> None:
        """Record what happened to a client this round under one of :data:`EVENT_KEYS`."""
        self.events[event].append(value)

    def cancel(self, stop: set[int]) -> list[int]:
        """Stop the in-flight jobs of the clients in ``stop`` (they become idle); returns them in heap order."""
        keep, cancelled = [], []
        for entry in self.in_flight:
            item = entry[2]
            if item.client_id in stop:
                self.pending.collect(item.client_id)  # its state was committed at dispatch under the inline executor
                self.busy_s[item.client_id] += max(0.0, self.now - item.dispatched_at)
                self.note("cancelled", item.client_id)
                cancelled.append(item.client_id)
            else:
                keep.append(entry)
        heapq.heapify(keep)
        self.in_flight = keep
        return cancelled

    # -- aggregation -------------------------------------------------------------------------

    def close_round(self) -> ClosedRound:
        """Hand the round's arrivals and events to aggregation and start gathering the next round's."""
        closed = ClosedRound(arrived=self.arrived, events=self.events, arrival_times=self.arrival_times,
                             ledger_mark=self.ledger_mark)
        self.arrived, self.events, self.arrival_times, self.since = [], _no_events(), {}, self.now
        return closed

    def mark_ledger(self, length: int) -> None:
        """The ledger's length after an aggregation: the next round's row counts the traffic after it."""
        self.ledger_mark = length

    def utilisation(self, closed: ClosedRound) -> dict[str, Any]:
        """Virtual time, Co-S2P's resource utilisation (Eq. 17) of the closed round, and busy fractions."""
        out: dict[str, Any] = {"virtual_time": self.now}
        times = list(closed.arrival_times.values())
        if times and max(times) > 0:
            out["ru"] = sum(times) / (len(times) * max(times))
        if self.now > 0:
            busy = dict(self.busy_s)
            for _, c, item in self.in_flight:  # partly done work of jobs still running
                busy[c] += max(0.0, min(self.now, item.arrival) - item.dispatched_at)
            per_client = [busy[c] / self.now for c in sorted(busy)]
            out["utilisation"] = sum(per_client) / len(per_client)
            out["client_utilisation"] = [round(u, 6) for u in per_client]
        return out

    # -- snapshots ---------------------------------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        """The state at a round boundary (``arrived`` is then empty) as plain values, tensors and records."""
        self.pending.collect_all()  # a checkpoint holds finished jobs only
        return {"now": self.now, "since": self.since, "ledger_mark": self.ledger_mark, "busy_s": dict(self.busy_s),
                "in_flight": [attrs.asdict(item, recurse=False) for _, _, item in self.in_flight]}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.now, self.since = float(state["now"]), float(state["since"])
        self.ledger_mark = int(state["ledger_mark"])
        self.busy_s = {int(k): float(v) for k, v in state["busy_s"].items()}
        items = [InFlight(**d) for d in state["in_flight"]]
        self.in_flight = [(i.arrival, i.client_id, i) for i in items]
        heapq.heapify(self.in_flight)
