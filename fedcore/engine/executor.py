"""Executors run client jobs. The inline executor runs them one after another in this process."""
from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Protocol

from fedcore.engine.client_job import ClientJob, JobResult, run_client_job

if TYPE_CHECKING:
    from fedcore.pipeline import Pipeline


class Executor(Protocol):
    def start(self, pipeline: Pipeline, dataset: Any) -> None: ...
    def run(self, jobs: Sequence[ClientJob]) -> list[JobResult]: ...
    def close(self) -> None: ...


class InlineExecutor:
    """Runs every client job in the calling process, in the order given."""

    name = "inline"

    def start(self, pipeline: Pipeline, dataset: Any) -> None:
        self._hooks = pipeline.hooks
        self._dataset = dataset

    def run(self, jobs: Sequence[ClientJob]) -> list[JobResult]:
        return [run_client_job(self._hooks, job, self._dataset) for job in jobs]

    def close(self) -> None:
        pass
