"""Jobs handed to an executor whose results the engine has not collected yet: parallel async on Ray.

An executor with ``submit(jobs) -> handles`` (each handle has ``result()``, see
:meth:`fedcore.engine.ray_executor.RayExecutor.submit`) lets jobs run while the engine moves on. Without a
clock a job's virtual arrival is its dispatch time, known before it runs, so the engine queues it at once
and collects its result only when something needs it: its arrival, its cancellation, a checkpoint, the end
of the run, or a read of that client's state (:class:`LazyStates`). The result is then applied exactly as
the inline executor applies it at dispatch, so the history is the same; meanwhile every job in flight
trains at once. With a clock the arrival time is priced from the finished job, so results are collected at
dispatch and only a dispatch wave runs in parallel.
"""
from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Any, Protocol

from fedcore.jobs import JobResult
from fedcore.types import ClientState

if TYPE_CHECKING:
    from _collections_abc import dict_items as _dict_items
    from _collections_abc import dict_values as _dict_values


class Handle(Protocol):
    def result(self) -> JobResult: ...


def submit_of(executor: Any) -> Callable[[Any], list[Handle]] | None:
    """The executor's ``submit`` (asked once, at set-up, so that the loop probes nothing), or ``None``."""
    submit = getattr(executor, "submit", None)
    return submit if callable(submit) else None


class PendingJobs:
    """Submitted jobs by client id (a client has at most one job in flight), each with what to do with its result."""

    def __init__(self) -> None:
        self._jobs: dict[int, tuple[Handle, Callable[[JobResult], None]]] = {}

    def add(self, client_id: int, handle: Handle, finish: Callable[[JobResult], None]) -> None:
        if client_id in self._jobs:
            raise RuntimeError(f"client {client_id} already has a job in flight")
        self._jobs[client_id] = (handle, finish)

    def collect(self, client_id: int) -> None:
        """Wait for the client's job, if one is pending, and apply its result."""
        entry = self._jobs.pop(client_id, None)
        if entry is not None:
            handle, finish = entry
            finish(handle.result())

    def collect_all(self) -> None:
        for client_id in sorted(self._jobs):
            self.collect(client_id)

    def __contains__(self, client_id: object) -> bool:
        return client_id in self._jobs

    def __len__(self) -> int:
        return len(self._jobs)


class LazyStates(dict[int, ClientState]):
    """``run.client_states`` while jobs may be pending: reading a client's state first collects its job, so
    every reader sees what it would see under the inline executor. Iterating keys collects nothing."""

    def __init__(self, states: Mapping[int, ClientState], pending: PendingJobs) -> None:
        super().__init__(states)
        self.pending = pending

    def __getitem__(self, client_id: int) -> ClientState:
        self.pending.collect(client_id)
        return super().__getitem__(client_id)

    def get(self, client_id: int, default: Any = None) -> Any:  # type: ignore[override]
        self.pending.collect(client_id)
        return super().get(client_id, default)

    def items(self) -> _dict_items[int, ClientState]:
        self.pending.collect_all()
        return super().items()

    def values(self) -> _dict_values[int, ClientState]:
        self.pending.collect_all()
        return super().values()

    def __iter__(self) -> Iterator[int]:  # defined so that dict(states) and {**states} go through __getitem__
        return super().__iter__()

    def copy(self) -> dict[int, ClientState]:
        self.pending.collect_all()
        return dict(super().items())

    def __reduce__(self) -> Any:  # a copy or a pickle is a plain dict of collected states
        return (dict, (self.copy(),))


__all__ = ["Handle", "LazyStates", "PendingJobs", "submit_of"]
