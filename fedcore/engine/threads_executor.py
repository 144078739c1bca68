"""Run the clients of a dispatch wave in a pool of threads in this process: all cores, no Ray.

    executor = { name = "threads", workers = 2 }        # in a TOML config; ThreadsExecutor(workers=2) in Python

Torch releases the GIL inside its kernels (and autograd's backward), so clients training in threads use several
cores at once; each worker thread gets its own intra-op thread count (``threads_per_worker``, 1 by default), so N
workers keep N cores busy. A wave is split into one cohort per worker, largest clients first onto the least loaded
worker, and the ``fedcore_train_cohort`` slot runs on each; results come back in dispatch order, so the engine
applies them exactly as the inline executor's and the history, ledger, client states and checkpoints are the
inline run's, bit for bit, under every scheduler. As on Ray, a job's context carries no server state (``ctx.run``
is ``None``): client-side code reaches the server only through its channel.

What the threads share is handled here:

* torch's global random generator (one per process). Inline, each job draws from it seeded per job; threads cannot
  each own it. The first job of each kind (share signature and module structure) runs on the calling thread while
  :func:`~fedcore.runtime.job_rng.recording_draws` watches: jobs of a kind that draws from it (``nn.Dropout``,
  ``torch.rand`` without a generator) keep training one after another on the calling thread, the others go to the
  pool, where nothing may draw from it; the global state is compared after every wave, and a job that drew
  after all stops the run with one line instead of giving a history that depends on thread timing;
* the cohort provider must say it runs its jobs independently (``thread_safe = True`` on the class, as the
  built-in ``per-job`` cohort does); with any other provider every wave trains on the calling thread;
* shares with a server endpoint (split learning) are refused: their server side is stepped in client order;
* grad mode and context variables are the caller's in every worker; the network ledger, the clock, the cost
  model and the client states are only touched on the calling thread, before and after the wave.

Between waves the workers are lent to :func:`fedcore.runtime.workers.spread` (from ``start`` to ``close``): the
global model's evaluation runs its batches there, combined in batch order, so the calling thread no longer
evaluates alone while the cores it trained on sit idle (about 60 % of what stayed on it per round of the digits job).

Jobs are run at dispatch (no ``submit``): an asynchronous policy that starts one replacement per arrival gains
nothing, a synchronous round or a semi-asynchronous wave trains its clients at once.
"""
from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor, wait
import contextlib
import contextvars
import logging
import os
import threading
from typing import TYPE_CHECKING, Any, ClassVar

import attrs
import torch

from fedcore.errors import ConfigError
from fedcore.jobs import ClientJob, JobResult, run_cohort
from fedcore.runtime.job_rng import recording_draws, worker_thread
from fedcore.runtime.workers import GlobalRandomDrawError, lent_workers
from fedcore.settings import setting

if TYPE_CHECKING:
    from fedcore.pipeline import Pipeline

log = logging.getLogger("fedcore")

__all__ = ["GlobalRandomDrawError", "ThreadsExecutor", "balance", "job_kind"]


def job_kind(job: ClientJob) -> tuple[Any, ...]:
    """What decides whether a job draws from torch's global generator: its share's signature and module types."""
    return (job.share.signature, tuple(type(m) for m in job.share.module.modules()))


def balance(sizes: Sequence[int], workers: int) -> list[list[int]]:
    """Positions split into at most ``workers`` groups of near-equal total size: largest first onto the least
    loaded group (ties: the lowest group). Each group keeps dispatch order."""
    groups: list[list[int]] = [[] for _ in range(min(workers, len(sizes)))]
    load = [0] * len(groups)
    for i in sorted(range(len(sizes)), key=lambda i: (-sizes[i], i)):
        g = min(range(len(groups)), key=lambda g: (load[g], g))
        groups[g].append(i)
        load[g] += sizes[i]
    return [sorted(g) for g in groups if g]


def _available_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def _train_in_worker(hooks: Any, jobs: list[ClientJob], dataset: Any, grad: bool) -> list[JobResult]:
    with worker_thread(), torch.set_grad_enabled(grad):
        return run_cohort(hooks, jobs, dataset)


@attrs.define(eq=False)
class ThreadsExecutor:
    """The clients of a wave trained in ``workers`` threads of this process (0: one per available core).

    ``threads_per_worker`` is each worker's intra-op thread count (1: N workers use N cores). The history is the
    inline executor's bit for bit when the calling thread uses the same count (a config's ``threads``, 1 by default).
    """

    name: ClassVar[str] = "threads"

    workers: int = setting(0, low=0, help="worker threads training clients at once (0: one per available core)")
    threads_per_worker: int = setting(1, low=1, help="torch intra-op threads of each worker")
    lanes: dict[str, int] = attrs.field(init=False, factory=lambda: {"calling_thread": 0, "workers": 0})
    """Jobs trained on the calling thread and on the workers in the current run (for tests and logs)."""
    _pool: ThreadPoolExecutor | None = attrs.field(init=False, default=None, repr=False)
    _draws: dict[tuple[Any, ...], bool] = attrs.field(init=False, factory=dict, repr=False)  # kind -> draws
    _said: set[str] = attrs.field(init=False, factory=set, repr=False)
    _parallel: bool = attrs.field(init=False, default=False, repr=False)
    _hooks: Any = attrs.field(init=False, default=None, repr=False)
    _dataset: Any = attrs.field(init=False, default=None, repr=False)
    _lending: Any = attrs.field(init=False, default=None, repr=False)  # the pool lent to fedcore.runtime.workers

    def __attrs_post_init__(self) -> None:
        if self.workers == 0:
            self.workers = _available_cores()

    # -- life cycle ---------------------------------------------------------------------------

    def start(self, pipeline: Pipeline, dataset: Any) -> None:
        self._hooks = pipeline.hooks
        self._dataset = dataset
        provider = pipeline.provider("cohort")
        self._parallel = bool(getattr(provider, "thread_safe", False))
        if not self._parallel:
            self._say(f"threads executor: the cohort provider {pipeline.name_of(provider)} does not declare "
                      f"thread_safe = True; every wave trains on the calling thread (the inline history, no speed-up)")
        self._draws = {}
        self.lanes = {"calling_thread": 0, "workers": 0}
        if self._parallel and self._pool is None:
            self._pool = self._start_pool()
        if self._pool is not None and self._lending is None:  # the evaluation's shards, between waves
            self._lending = lent_workers(self._pool)
            self._lending.__enter__()

    def _start_pool(self) -> ThreadPoolExecutor:
        """Start every worker now, each with its own intra-op thread count, then give the process its count back.

        torch keeps the count per thread (OpenMP's) plus one process-wide default that threads not yet started
        pick up; ``set_num_threads`` in a worker sets both, so the default is restored once all workers run.
        """
        own = torch.get_num_threads()
        ready = threading.Barrier(self.workers + 1)

        def init() -> None:
            torch.get_num_threads()  # settle this thread's count before changing it (torch initialises it lazily)
            torch.set_num_threads(self.threads_per_worker)
            ready.wait(timeout=60)

        pool = ThreadPoolExecutor(max_workers=self.workers, thread_name_prefix="fedcore-client",
                                  initializer=init)
        for _ in range(self.workers):
            pool.submit(lambda: None)
        ready.wait(timeout=60)  # a worker that could not start breaks the barrier instead of hanging the run
        torch.set_num_threads(own)
        if self.workers * self.threads_per_worker > _available_cores():
            self._say(f"threads executor: {self.workers} workers x {self.threads_per_worker} torch threads is more "
                      f"than the {_available_cores()} available cores")
        return pool

    def close(self) -> None:
        if self._lending is not None:
            with contextlib.suppress(ValueError):  # closed from another context: the lending ends with it anyway
                self._lending.__exit__(None, None, None)
            self._lending = None
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None

    # -- a wave -------------------------------------------------------------------------------

    def run(self, jobs: Sequence[ClientJob]) -> list[JobResult]:
        """Train a wave; results in the order of the jobs."""
        if not jobs:
            return []
        refuse(jobs)
        jobs = [attrs.evolve(job, ctx=job.ctx.for_client(job.client.id, job.ctx.channel, remote=True)) for job in jobs]
        if not self._parallel:
            self.lanes["calling_thread"] += len(jobs)
            return run_cohort(self._hooks, jobs, self._dataset)
        results: list[JobResult | None] = [None] * len(jobs)
        kinds = [job_kind(job) for job in jobs]
        for i, kind in enumerate(kinds):
            if kind not in self._draws:  # the first of its kind: on this thread, watched
                results[i] = self._here([jobs[i]], watch=kind)[0]
        serial = [i for i, r in enumerate(results) if r is None and self._draws.get(kinds[i], True)]
        if serial:
            for i, result in zip(serial, self._here([jobs[i] for i in serial])):
                results[i] = result
        parallel = [i for i, r in enumerate(results) if r is None]
        if parallel:
            for i, result in zip(parallel, self._in_pool([jobs[i] for i in parallel])):
                results[i] = result
        assert all(r is not None for r in results)
        return [r for r in results if r is not None]

    def _here(self, jobs: list[ClientJob], watch: tuple[Any, ...] | None = None) -> list[JobResult]:
        """A cohort on the calling thread, as inline; ``watch``: learn whether jobs of that kind draw."""
        self.lanes["calling_thread"] += len(jobs)
        if watch is None:
            return run_cohort(self._hooks, jobs, self._dataset)
        with recording_draws() as record:
            results = run_cohort(self._hooks, jobs, self._dataset)
        if all(r.error is None for r in results):  # a failed job may have stopped before its draws: ask again
            self._draws[watch] = record.drew
            if record.drew:
                self._say("threads executor: client jobs of this model draw from torch's global random generator "
                          "(nn.Dropout, torch.rand without a generator); they train one after another on the calling "
                          "thread so that the history stays the inline one. Draw from job.ctx.rng(...) to train them "
                          "in parallel")
        return results

    def _in_pool(self, jobs: list[ClientJob]) -> list[JobResult]:
        """Cohorts on the workers; torch's global generator must come back untouched."""
        assert self._pool is not None
        self.lanes["workers"] += len(jobs)
        groups = balance([len(job.pool) for job in jobs], self.workers)
        state = torch.random.get_rng_state()
        grad = torch.is_grad_enabled()
        futures = [self._pool.submit(contextvars.copy_context().run, _train_in_worker, self._hooks,
                                     [jobs[i] for i in group], self._dataset, grad) for group in groups]
        wait(futures)  # every worker finishes before the generator is checked (or an error is raised)
        drew = not torch.equal(torch.random.get_rng_state(), state)
        torch.random.set_rng_state(state)
        done = [f.result() for f in futures]  # a worker's unexpected error is raised here
        if drew:
            raise GlobalRandomDrawError(
                f"threads executor: client work in a worker thread drew from torch's global random generator (round "
                f"{jobs[0].ctx.round}, clients {[job.client.id for job in jobs][:8]}), though the first job of its "
                f"kind did not; its result would depend on thread timing. Draw from job.ctx.rng(...), or resume the "
                f"run with --set executor=inline")
        results: list[JobResult | None] = [None] * len(jobs)
        for group, out in zip(groups, done):
            for i, result in zip(group, out):
                results[i] = result
        return [r for r in results if r is not None]

    def _say(self, message: str) -> None:
        if message not in self._said:
            self._said.add(message)
            log.warning(message)


def refuse(jobs: Sequence[ClientJob]) -> None:
    """What threads cannot run so that the history stays the inline one: one ``ConfigError`` line."""
    split = [job.client.id for job in jobs if job.share.endpoint is not None]
    if split:
        endpoint = type(next(j for j in jobs if j.share.endpoint is not None).share.endpoint).__name__
        raise ConfigError(f"executor threads cannot run shares with a server endpoint (clients {split[:8]}, endpoint "
                          f"{endpoint}): split-learning clients step the server side in client order, which threads "
                          f"would interleave. Use executor = \"inline\" for split learning")
    placement = jobs[0].placement
    if placement is not None and placement.torch_device.type != "cpu":
        raise ConfigError(f"executor threads trains on the CPU; device = {placement.device!r}: use executor = "
                          f"\"inline\" (one device runs a client's kernels in parallel already) or \"ray\" with "
                          f"gpus_per_worker")
