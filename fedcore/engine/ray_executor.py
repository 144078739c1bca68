"""Run client jobs in parallel on Ray actors: a local Ray cluster on loopback by default, or ``address=``.

Each actor rebuilds the pipeline from its components (``Pipeline`` pickles by its component list)
and receives the training set once through Ray's object store. Jobs are *submitted* (:meth:`RayExecutor.submit`)
and collected when the engine needs them, so every job in flight runs at once: under ``async``, ``buffered`` and
``semi-async`` policies the replacement started after each arrival trains while the others still do, and the
virtual clock still decides the order the server hears back (see docs/runtime.md, "Parallel async on Ray").
A dispatch wave is split into one cohort per actor, each job going to the actor with the fewest uncollected jobs
(ties: the lowest index, so a fresh wave goes round-robin), and each actor runs the ``fedcore_train_cohort`` slot
once on its cohort: a cohort trainer sees the jobs of its worker, not the whole wave. A job travels with the
client's share (download applied) and local state; the update's ``base`` stays on the server. Shares with a
server endpoint (split learning) are refused at the first dispatch with a ``ConfigError`` until a distributed
endpoint exists. A job's context carries no server state (``run=None``: client-side code reaches the server only
through its channel). The result brings back the update, the client's state and the channel's transfer rows, so
the ledger and the client states are the same as inline. ``gpus_per_worker`` asks Ray for (fractional) GPUs per
actor (Flower's ``num_gpus``); a run placed on CUDA (``device = "cuda"``) needs it.
Per-job randomness comes from ``(seed, round, client)`` streams, so histories are identical to the
inline executor's for the same seed (with the same intra-op thread count, see ``threads_per_worker``).
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import attrs

from fedcore.engine.ray_cluster import LOOPBACK, check_bind, check_reachable, init_ray
from fedcore.errors import ConfigError
from fedcore.jobs import ClientJob, JobResult, run_cohort

if TYPE_CHECKING:
    from fedcore.pipeline import Pipeline

__all__ = ["RayExecutor", "check_reachable", "refuse_endpoints"]


class _Worker:
    """One Ray actor: the pipeline's hooks and the training set, reused for every job it gets."""

    def __init__(self, pipeline: Pipeline, dataset: Any, threads: int | None) -> None:
        import torch

        if threads:
            torch.set_num_threads(threads)
        self.load(pipeline, dataset)

    def load(self, pipeline: Pipeline, dataset: Any) -> bool:
        """Take another run's pipeline (rebuilt from its components, as at the start) and training set."""
        self.hooks = pipeline.hooks
        self.dataset = dataset
        return True

    def run(self, jobs: list[ClientJob]) -> list[JobResult]:
        return run_cohort(self.hooks, jobs, self.dataset)

    def ping(self) -> bool:
        return True


def refuse_endpoints(jobs: Sequence[ClientJob]) -> None:
    """A share with a server endpoint (split learning) cannot run on a worker yet: the endpoint lives on the
    server, and a worker would train a copy of it that the server never sees. Refuse it clearly."""
    split = [job.client.id for job in jobs if job.share.endpoint is not None]
    if split:
        endpoint = type(next(j for j in jobs if j.share.endpoint is not None).share.endpoint).__name__
        raise ConfigError(f"RayExecutor cannot run shares with a server endpoint (clients {split[:8]}, "
                          f"endpoint {endpoint}): the endpoint would be trained as a copy on the worker and its "
                          f"traffic would never reach the server. Use the inline executor for split learning until a "
                          f"distributed endpoint exists")


class _Cohort:
    """One actor call's results, fetched once, handed out job by job."""

    def __init__(self, ref: Any, worker: int, outstanding: list[int]) -> None:
        self.ref, self.worker, self.outstanding = ref, worker, outstanding
        self.results: list[JobResult] | None = None

    def take(self, position: int) -> JobResult:
        if self.results is None:
            import ray

            self.results = list(ray.get(self.ref))
            self.ref = None
        self.outstanding[self.worker] -= 1
        return self.results[position]


@attrs.frozen(eq=False)
class RayJob:
    """A submitted job: :meth:`result` waits for it (and only for it)."""

    cohort: _Cohort
    position: int

    def result(self) -> JobResult:
        return self.cohort.take(self.position)


class RayExecutor:
    """Client jobs on ``num_workers`` Ray actors; :meth:`submit` returns at once, :meth:`run` waits.

    ``address=None`` starts a local Ray cluster with ``num_workers`` CPUs, no dashboard, every socket bound to
    ``bind`` (``"127.0.0.1"``: loopback only; ``"auto"``: Ray's choice of this machine's address, so that other
    machines can join; or an IP address). ``"auto"`` joins the cluster this machine belongs to; ``"host:port"``
    or ``"ray://host:port"`` connects to an existing one (reachability is checked before any work).
    ``threads_per_worker`` fixes torch's intra-op threads in each actor (1 by default; bit-identical results to
    the inline executor need the same count in the driver). ``gpus_per_worker`` (fractional allowed, e.g. 0.25
    puts four workers on a GPU) is what each actor asks Ray for. ``init_kwargs`` go to ``ray.init``.
    ``keep_workers=True`` keeps the actors when a run ends, and this executor's next run in the same Ray session
    sends them its pipeline and training set instead of starting new ones (each new actor is a process that
    imports torch and fedcore: seconds); :meth:`release` ends them, as do dropping the executor and the session's
    end. A kept actor holds its CPUs (and GPUs) between runs.
    """

    name = "ray"

    def __init__(self, num_workers: int = 2, *, address: str | None = None, threads_per_worker: int | None = 1,
                 cpus_per_worker: float = 1.0, gpus_per_worker: float = 0.0, bind: str = LOOPBACK,
                 init_kwargs: dict[str, Any] | None = None, connect_timeout: float = 5.0,
                 shutdown_on_close: bool = False, keep_workers: bool = False) -> None:
        if num_workers < 1:
            raise ConfigError(f"RayExecutor.num_workers={num_workers}; must be >= 1")
        if threads_per_worker is not None and threads_per_worker < 1:
            raise ConfigError(f"RayExecutor.threads_per_worker={threads_per_worker}; must be >= 1 or None")
        if cpus_per_worker <= 0:
            raise ConfigError(f"RayExecutor.cpus_per_worker={cpus_per_worker}; must be > 0")
        if gpus_per_worker < 0:
            raise ConfigError(f"RayExecutor.gpus_per_worker={gpus_per_worker}; must be >= 0 (fractions share a GPU)")
        check_bind(bind)
        if address is not None:
            check_reachable(address, connect_timeout)
        self.num_workers = num_workers
        self.address = address
        self.threads_per_worker = threads_per_worker
        self.cpus_per_worker = cpus_per_worker
        self.gpus_per_worker = gpus_per_worker
        self.bind = bind
        self.init_kwargs = dict(init_kwargs or {})
        self.shutdown_on_close = shutdown_on_close
        self.keep_workers = keep_workers
        self._actors: list[Any] = []
        self._outstanding: list[int] = []
        self._started_ray = False
        self._session: tuple[str, str] | None = None  # the Ray session the actors live in

    def start(self, pipeline: Pipeline, dataset: Any) -> None:
        try:
            import ray
        except ImportError:
            raise ConfigError("RayExecutor needs Ray: pip install 'fedcore[ray]'") from None
        kwargs = dict(self.init_kwargs)  # a num_cpus given there wins over the workers' sum
        cpus = kwargs.pop("num_cpus", max(1, int(self.num_workers * self.cpus_per_worker + 0.999)))
        if init_ray(address=self.address, num_cpus=cpus, bind=self.bind, **kwargs):
            self._started_ray = True
        data_ref = ray.put(dataset)
        self._outstanding = [0] * self.num_workers
        context = ray.get_runtime_context()
        session = (context.get_job_id(), context.get_node_id())  # a new cluster reuses job ids, never node ids
        if self._actors and self._session == session:  # kept from this executor's last run
            ray.get([a.load.remote(pipeline, data_ref) for a in self._actors])
            return
        actor = ray.remote(num_cpus=self.cpus_per_worker, num_gpus=self.gpus_per_worker)(_Worker)
        self._actors = [actor.remote(pipeline, data_ref, self.threads_per_worker) for _ in range(self.num_workers)]
        self._session = session
        ray.get([a.ping.remote() for a in self._actors])  # surface start-up errors before the first round

    def submit(self, jobs: Sequence[ClientJob]) -> list[RayJob]:
        """Send a wave to the actors and return at once; each job's :meth:`RayJob.result` waits for it."""
        if not self._actors:
            raise RuntimeError("RayExecutor.submit() before start()")
        if not jobs:
            return []
        refuse_endpoints(jobs)
        self._check_device(jobs[0])
        cohorts: dict[int, list[ClientJob]] = {}
        where: list[tuple[int, int]] = []
        for job in jobs:
            w = min(range(len(self._actors)), key=lambda i: (self._outstanding[i], i))
            self._outstanding[w] += 1
            remote = job.ctx.for_client(job.client.id, job.ctx.channel, remote=True)
            cohort = cohorts.setdefault(w, [])
            where.append((w, len(cohort)))
            cohort.append(attrs.evolve(job, ctx=remote))
        calls = {w: _Cohort(self._actors[w].run.remote(c), w, self._outstanding) for w, c in cohorts.items()}
        return [RayJob(calls[w], i) for w, i in where]

    def run(self, jobs: Sequence[ClientJob]) -> list[JobResult]:
        """Run a wave and wait for all of it; results in the order of the jobs."""
        return [handle.result() for handle in self.submit(jobs)]

    def _check_device(self, job: ClientJob) -> None:
        placement = job.placement
        if placement is not None and placement.torch_device.type == "cuda" and self.gpus_per_worker <= 0:
            raise ConfigError(f"device={placement.device!r} with the Ray executor needs GPUs on its workers: set "
                              f"executor.gpus_per_worker (e.g. 0.25 runs four workers per GPU)")

    def close(self) -> None:
        """The end of a run: the actors end too, unless ``keep_workers`` keeps them for the next run."""
        if self.keep_workers and not self.shutdown_on_close:
            return
        self.release()

    def release(self) -> None:
        """End the actors (kept or not), and the Ray session too if this executor started it and
        ``shutdown_on_close`` says so."""
        import ray

        for a in self._actors:
            try:
                ray.kill(a)
            except Exception:  # the cluster may already be gone
                pass
        self._actors = []
        if self._started_ray and self.shutdown_on_close:
            ray.shutdown()
            self._started_ray = False
