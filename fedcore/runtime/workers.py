"""Server-side work spread over the threads executor's workers: the evaluation of the global model, in shards.

While a run uses ``executor = { name = "threads" }`` its worker threads sit idle between waves, when the calling
thread aggregates and evaluates; :func:`spread` lends them that work. ``spread(fn, items)`` is
``[fn(item) for item in items]``: the same calls on the same items, the results in item order, so a caller that
combines them in that order (a loss summed batch by batch) gets the very numbers a serial loop gets, whatever
the number of workers. Without a lent pool (inline, Ray, no run) it is that loop, on the calling thread.

Each worker has its own intra-op thread count (``threads_per_worker``) and, as every torch thread, its own grad
mode: ``fn`` sets what it needs (``torch.no_grad()``). Work that draws from torch's global random generator
cannot be spread (the draws' order would follow thread timing): the generator's state is compared after the
work and a change stops the run with one line.
"""
from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
import contextvars
from typing import TypeVar

import torch

from fedcore.errors import FedcoreError
from fedcore.runtime.job_rng import in_worker_thread

__all__ = ["GlobalRandomDrawError", "lent_workers", "spread", "workers_lent"]

T = TypeVar("T")
R = TypeVar("R")

_LENT: contextvars.ContextVar[ThreadPoolExecutor | None] = contextvars.ContextVar("fedcore_lent_workers",
                                                                                  default=None)


class GlobalRandomDrawError(FedcoreError, RuntimeError):
    """Work in a worker thread drew from torch's global random generator: the result would depend on thread
    timing."""


@contextmanager
def lent_workers(pool: ThreadPoolExecutor | None) -> Iterator[None]:
    """Lend ``pool`` to :func:`spread` calls on this thread (context) for the block."""
    token = _LENT.set(pool)
    try:
        yield
    finally:
        _LENT.reset(token)


def workers_lent() -> bool:
    """Whether :func:`spread` would run in worker threads here."""
    return _LENT.get() is not None


def spread(fn: Callable[[T], R], items: Sequence[T], *, what: str = "work") -> list[R]:
    """``[fn(item) for item in items]``, in the lent workers when there are any (results in item order)."""
    pool = _LENT.get()
    if pool is None or len(items) < 2 or in_worker_thread():  # from a worker: here (the pool may be full)
        return [fn(item) for item in items]
    state = torch.random.get_rng_state()
    results = list(pool.map(fn, items))
    if not torch.equal(torch.random.get_rng_state(), state):
        raise GlobalRandomDrawError(f"threads executor: the {what} drew from torch's global random generator in "
                                    f"worker threads; its result would depend on thread timing. Draw from a "
                                    f"torch.Generator of its own, or run with executor = \"inline\"")
    return results
