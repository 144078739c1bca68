"""Client work for one dispatch wave: the jobs, the cohort that trains them, the upload of each result.

A job is a plain record so that any executor (inline, Ray) can run it. An executor hands a *cohort*
(the jobs of one wave, or its share of them) to :func:`run_cohort`, which calls the
``fedcore_train_cohort`` slot once and then uploads every update through its own client's channel.
The result carries the update, the client's state (it lives on the client and comes back with it),
the client's channel (what crossed it) and the traceback if the client failed.
"""
from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
import contextlib
import time
import traceback
from typing import TYPE_CHECKING, Any

import attrs
import torch

from fedcore.contexts import RoundContext
from fedcore.engine.job_rng import cohort_rng, job_torch_rng, seed_torch
from fedcore.network import Channel, Transfer, send_entries
from fedcore.runtime.meter import count_samples
from fedcore.runtime.placement import Placement, training_precision
from fedcore.types import ClientData, ClientFailed, ClientInfo, ClientState, ClientUpdate, Share

__all__ = ["ClientJob", "JobResult", "cohort_problem", "run_cohort", "seed_torch"]

if TYPE_CHECKING:
    from fedcore.pipeline import Hooks


@attrs.frozen(kw_only=True, eq=False)
class ClientJob:
    """One client's work: its share (download already applied), candidate pool, state and bound context.

    ``ctx.channel`` is the client's own channel for this job. ``dataset`` (the training set) and
    ``hooks`` (the pipeline's slots) are what the running side holds; ``placement`` is the run's device and
    precision (client training runs under its autocast); :func:`run_cohort` binds them
    where the job runs, so they never travel with it. :meth:`select_data` and :meth:`local_update`
    call the pipeline's providers for this job (what the default cohort does); :meth:`trained` tells the
    observers that the job's training finished.
    """

    client: ClientInfo
    share: Share
    pool: Sequence[int]  # the client's IndexList (Partition.train or .pool)
    state: ClientState
    ctx: RoundContext
    version: int
    placement: Placement | None = None
    dataset: Any = None
    hooks: Any = attrs.field(default=None, repr=False)
    on_trained: Callable[[ClientJob, ClientUpdate | ClientFailed], None] | None = attrs.field(default=None,
                                                                                             repr=False)

    @property
    def channel(self) -> Channel:
        assert self.ctx.channel is not None, "the engine gives every job its channel"
        return self.ctx.channel

    def select_data(self) -> Sequence[int]:
        """``fedcore_select_data`` for this job: the indices it trains on."""
        return self.hooks.fedcore_select_data(client=self.client, indices=self.pool, dataset=self.dataset,
                                              share=self.share, state=self.state, ctx=self.ctx)

    def local_update(self, indices: Sequence[int]) -> ClientUpdate:
        """``fedcore_local_update`` for this job on ``indices`` of the training set."""
        data = ClientData(dataset=self.dataset, indices=indices)
        return self.hooks.fedcore_local_update(client=self.client, share=self.share, data=data, state=self.state,
                                               ctx=self.ctx)

    def trained(self, outcome: ClientUpdate | ClientFailed) -> None:
        """Tell the observers (``fedcore_client_trained``) that this job's training finished, once.

        A cohort calls it as each client (or each batch of clients) finishes, so that a progress display
        follows the work; :func:`run_cohort` calls it for every job the cohort did not report.
        """
        if self.on_trained is not None:
            self.on_trained(self, outcome)

    @contextlib.contextmanager
    def torch_rng(self) -> Iterator[torch.Generator]:
        """This job's stream of torch's global generator: ``with job.torch_rng(): ...`` seeds the global generator
        from ``ctx.seed_for("torch")`` inside a fork (code drawing without a generator, ``nn.Dropout``, is then
        reproducible) and yields it. In a worker thread of the threads executor it yields a private generator
        seeded the same way and leaves the global one alone (see :mod:`fedcore.engine.job_rng`)."""
        with job_torch_rng(self.ctx.seed_for("torch")) as generator:
            yield generator


@attrs.frozen(kw_only=True, eq=False)
class JobResult:
    client_id: int
    update: ClientUpdate | None
    state: ClientState
    channel: Channel
    wall_s: float
    error: str | None = None
    share_meta: dict[str, Any] = attrs.field(factory=dict)
    work: dict[str, int] = attrs.field(factory=dict)  # samples the share's module processed (fedcore.runtime.meter)

    @property
    def rows(self) -> tuple[Transfer, ...]:
        """Everything the job's channel carried: download, per-batch traffic, upload."""
        return tuple(self.channel.rows)


def cohort_problem(jobs: Sequence[ClientJob], outcomes: Any) -> str | None:
    """Why a cohort provider's answer is unusable, or ``None``: one entry per job, in job order."""
    if not isinstance(outcomes, Sequence) or isinstance(outcomes, (str, bytes)):
        return f"returned a {type(outcomes).__name__}, not a sequence of ClientUpdate"
    if len(outcomes) != len(jobs):
        return f"returned {len(outcomes)} updates for {len(jobs)} jobs (one per job, in job order)"
    for job, out in zip(jobs, outcomes):
        if isinstance(out, ClientFailed):
            if out.client_id != job.client.id:
                return f"reported client {out.client_id} failed in the place of client {job.client.id}"
        elif not isinstance(out, ClientUpdate):
            return f"returned a {type(out).__name__} for client {job.client.id}, not a ClientUpdate"
        elif out.client_id not in (-1, job.client.id):
            return f"returned the update of client {out.client_id} in the place of client {job.client.id}"
    return None


def run_cohort(hooks: Hooks, jobs: Sequence[ClientJob], dataset: Any) -> list[JobResult]:
    """Train a cohort through ``fedcore_train_cohort`` and upload each update over its client's channel.

    The torch global RNG is forked around the cohort, so client work never disturbs the caller's random state
    (the default cohort seeds it per job from ``(seed, round, client)``, :meth:`ClientJob.torch_rng`); in a worker
    thread the executor keeps it instead (:mod:`fedcore.engine.job_rng`). A cohort provider that raises, or answers
    with the wrong shape, fails every job of the cohort; a :class:`~fedcore.types.ClientFailed` entry fails one
    client. Every job is reported to the ``fedcore_client_trained`` observers once: by the cohort as it finishes
    (:meth:`ClientJob.trained`), else here when the cohort returns.
    """
    if not jobs:
        return []
    reported: set[int] = set()

    def report(job: ClientJob, outcome: ClientUpdate | ClientFailed) -> None:
        if job.client.id in reported:  # a client is dispatched at most once per wave
            return
        reported.add(job.client.id)
        if isinstance(outcome, ClientUpdate) and outcome.client_id != job.client.id:
            outcome = attrs.evolve(outcome, client_id=job.client.id)
        hooks.fedcore_client_trained(client=job.client, outcome=outcome, ctx=job.ctx)

    jobs = [attrs.evolve(job, dataset=dataset, hooks=hooks, on_trained=report) for job in jobs]
    start = time.perf_counter()
    works: list[dict[str, int]] = []
    try:
        with cohort_rng(), training_precision(jobs[0].placement), \
                contextlib.ExitStack() as meters:
            works = [meters.enter_context(count_samples(job.share.module)) for job in jobs]
            ctx = RoundContext(round=jobs[0].ctx.round, seed=jobs[0].ctx.seed, run=jobs[0].ctx.run)
            outcomes = hooks.fedcore_train_cohort(jobs=jobs, ctx=ctx)
        problem = cohort_problem(jobs, outcomes)
        if problem is not None:
            raise TypeError(f"fedcore_train_cohort {problem}")
    except Exception:  # the cohort as a whole failed: every client in it is reported, the run goes on
        error = traceback.format_exc()
        outcomes = [ClientFailed(client_id=job.client.id, error=error) for job in jobs]
        works = works or [{} for _ in jobs]
    for job, out in zip(jobs, outcomes):
        job.trained(out)
    wall = (time.perf_counter() - start) / len(jobs)
    return [_upload(job, out, dict(work), wall) for job, out, work in zip(jobs, outcomes, works)]


def _upload(job: ClientJob, outcome: ClientUpdate | ClientFailed, work: dict[str, int], wall_s: float) -> JobResult:
    update: ClientUpdate | None = None
    error = outcome.error if isinstance(outcome, ClientFailed) else None
    if error is None:
        assert isinstance(outcome, ClientUpdate)
        try:
            sent = send_entries(job.channel.up, outcome.tensors, job.share.kinds)
            update = attrs.evolve(outcome, tensors=sent, version=job.version, client_id=job.client.id,
                                  meta={**job.share.meta, **outcome.meta}, share_signature=job.share.signature)
            job.state.rounds_participated += 1
        except Exception:  # an unsendable update is this client's failure
            update, error = None, traceback.format_exc()
    return JobResult(client_id=job.client.id, update=update, state=job.state, channel=job.channel, wall_s=wall_s,
                     error=error, share_meta=dict(job.share.meta), work=work)
