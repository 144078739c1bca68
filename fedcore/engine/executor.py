"""Executors run a dispatch wave of client jobs. The inline executor runs the wave in this process.

An executor receives every job of a wave and hands them to the ``fedcore_train_cohort`` slot
(:func:`~fedcore.engine.client_job.run_cohort`): inline, the whole wave is one cohort; the Ray
executor splits it into one cohort per worker. Results come back in the order of the jobs.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Protocol

from fedcore.engine.client_job import ClientJob, JobResult, run_cohort

if TYPE_CHECKING:
    from fedcore.pipeline import Pipeline


class Executor(Protocol):
    def start(self, pipeline: Pipeline, dataset: Any) -> None: ...
    def run(self, jobs: Sequence[ClientJob]) -> list[JobResult]: ...
    def close(self) -> None: ...


class InlineExecutor:
    """Runs the whole wave as one cohort in the calling process."""

    name = "inline"

    def start(self, pipeline: Pipeline, dataset: Any) -> None:
        self._hooks = pipeline.hooks
        self._dataset = dataset

    def run(self, jobs: Sequence[ClientJob]) -> list[JobResult]:
        return run_cohort(self._hooks, jobs, self._dataset)

    def close(self) -> None:
        pass
