"""Run client jobs in parallel on Ray actors: a local Ray cluster by default, ``address=`` for an existing one.

Each actor rebuilds the pipeline from its components (``Pipeline`` pickles by its component list)
and receives the training set once through Ray's object store. A dispatch wave is split round-robin
into one cohort per actor (job ``i`` goes to actor ``i % num_workers``), and each actor runs the
``fedcore_train_cohort`` slot once on its cohort: a cohort trainer sees the jobs of its worker, not
the whole wave. A job travels with the client's share (download applied) and local state; the update's
``base`` stays on the server. Shares with a server endpoint (split learning) are refused at the first
dispatch with a ``ConfigError`` until a distributed endpoint exists. A job's context carries no server
state (``run=None``: client-side code reaches the server only through its channel). The result brings back
the update, the client's state and the channel's transfer rows, so the ledger and the client states are the
same as inline.
Per-job randomness comes from ``(seed, round, client)`` streams, so histories are identical to the
inline executor's for the same seed (with the same intra-op thread count, see ``threads_per_worker``).
"""
from __future__ import annotations

from collections.abc import Sequence
import socket
from typing import TYPE_CHECKING, Any
from urllib.parse import urlparse

import attrs

from fedcore.engine.client_job import ClientJob, JobResult, run_cohort
from fedcore.errors import ConfigError

if TYPE_CHECKING:
    from fedcore.pipeline import Pipeline


def check_reachable(address: str, timeout: float = 5.0) -> None:
    """Fail fast, before any work, when a Ray address cannot be reached (``host:port`` or ``ray://host:port``)."""
    if address in ("auto", "local"):
        return
    parsed = urlparse(address if "://" in address else f"ray://{address}")
    host, port = parsed.hostname, parsed.port
    if not host or not port:
        raise ConfigError(f"RayExecutor.address={address!r} is not 'host:port', 'ray://host:port', 'auto' or 'local'")
    try:
        with socket.create_connection((host, port), timeout=timeout):
            pass
    except OSError as exc:
        raise ConfigError(f"RayExecutor.address={address!r}: cannot reach the Ray cluster at {host}:{port} "
                          f"({exc}); start it with `ray start --head --port={port}` or fix the address") from None


class _Worker:
    """One Ray actor: the pipeline's hooks and the training set, reused for every job it gets."""

    def __init__(self, pipeline: Pipeline, dataset: Any, threads: int | None) -> None:
        import torch

        if threads:
            torch.set_num_threads(threads)
        self.hooks = pipeline.hooks
        self.dataset = dataset

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


class RayExecutor:
    """Client jobs on ``num_workers`` Ray actors: each wave is split round-robin into one cohort per worker
    (``fedcore_train_cohort`` runs once per worker on its cohort), results in submission order.

    ``address=None`` starts a local Ray cluster with ``num_workers`` CPUs (and no dashboard);
    ``"auto"`` joins the cluster this machine belongs to; ``"host:port"`` or ``"ray://host:port"``
    connects to an existing one (reachability is checked before any work). ``threads_per_worker``
    fixes torch's intra-op threads in each actor (1 by default; bit-identical results to the inline
    executor need the same count in the driver). ``init_kwargs`` go to ``ray.init``.
    """

    name = "ray"

    def __init__(self, num_workers: int = 2, *, address: str | None = None, threads_per_worker: int | None = 1,
                 cpus_per_worker: float = 1.0, init_kwargs: dict[str, Any] | None = None,
                 connect_timeout: float = 5.0, shutdown_on_close: bool = False) -> None:
        if num_workers < 1:
            raise ConfigError(f"RayExecutor.num_workers={num_workers}; must be >= 1")
        if threads_per_worker is not None and threads_per_worker < 1:
            raise ConfigError(f"RayExecutor.threads_per_worker={threads_per_worker}; must be >= 1 or None")
        if cpus_per_worker <= 0:
            raise ConfigError(f"RayExecutor.cpus_per_worker={cpus_per_worker}; must be > 0")
        if address is not None:
            check_reachable(address, connect_timeout)
        self.num_workers = num_workers
        self.address = address
        self.threads_per_worker = threads_per_worker
        self.cpus_per_worker = cpus_per_worker
        self.init_kwargs = dict(init_kwargs or {})
        self.shutdown_on_close = shutdown_on_close
        self._actors: list[Any] = []
        self._started_ray = False

    def start(self, pipeline: Pipeline, dataset: Any) -> None:
        try:
            import ray
        except ImportError:
            raise ConfigError("RayExecutor needs Ray: pip install 'fedcore[ray]'") from None
        if not ray.is_initialized():
            kwargs: dict[str, Any] = {"include_dashboard": False, "log_to_driver": False, **self.init_kwargs}
            if self.address is None:
                kwargs.setdefault("num_cpus", max(1, int(self.num_workers * self.cpus_per_worker + 0.999)))
            else:
                check_reachable(self.address, 5.0)
                kwargs["address"] = self.address
                kwargs.pop("num_cpus", None)
                kwargs.pop("include_dashboard", None)
            ray.init(**kwargs)
            self._started_ray = True
        actor = ray.remote(num_cpus=self.cpus_per_worker)(_Worker)
        data_ref = ray.put(dataset)
        self._actors = [actor.remote(pipeline, data_ref, self.threads_per_worker) for _ in range(self.num_workers)]
        ray.get([a.ping.remote() for a in self._actors])  # surface start-up errors before the first round

    def run(self, jobs: Sequence[ClientJob]) -> list[JobResult]:
        import ray

        if not self._actors:
            raise RuntimeError("RayExecutor.run() before start()")
        refuse_endpoints(jobs)
        n = len(self._actors)
        cohorts: list[list[ClientJob]] = [[] for _ in range(n)]
        for i, job in enumerate(jobs):  # job i goes to worker i % n, as one job per call used to
            remote = job.ctx.for_client(job.client.id, job.ctx.channel, remote=True)
            cohorts[i % n].append(attrs.evolve(job, ctx=remote))
        refs = [(w, self._actors[w].run.remote(cohort)) for w, cohort in enumerate(cohorts) if cohort]
        per_worker = {w: iter(ray.get(ref)) for w, ref in refs}
        return [next(per_worker[i % n]) for i in range(len(jobs))]

    def close(self) -> None:
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
