"""Torch's global random generator around client work, on the calling thread and in worker threads.

Inline, every client job draws from torch's global generator seeded from ``(seed, round, client, "torch")``
inside a fork (:meth:`fedcore.jobs.ClientJob.torch_rng`), so that code drawing without a
generator (``nn.Dropout``, ``torch.randn``) is reproducible. That generator is one per process: jobs training at
once in threads cannot each own it, and a fork in one thread would restore it under another thread's draws. In a
worker thread of an in-process parallel executor (:mod:`fedcore.engine.threads_executor`) :func:`job_torch_rng`
and :func:`cohort_rng` therefore leave the global generator alone (a job gets a private generator seeded the same
way for code that asks for one), so that any draw from it in a worker shows as a changed global state, which the
executor checks after every wave. Which jobs draw from it is learnt on the calling thread, where
:func:`recording_draws` watches the first job of each kind.
"""
from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
import threading

import attrs
import torch

_local = threading.local()


def in_worker_thread() -> bool:
    """Whether this thread trains clients beside others (torch's global generator is then off limits)."""
    return getattr(_local, "worker", False)


@contextmanager
def worker_thread() -> Iterator[None]:
    """Mark this thread, for the block, as one of several training clients at once in this process."""
    before = in_worker_thread()
    _local.worker = True
    try:
        yield
    finally:
        _local.worker = before


@attrs.define
class DrawRecord:
    """Whether client work on this thread drew from torch's global generator while :func:`recording_draws` ran."""

    drew: bool = False


@contextmanager
def recording_draws() -> Iterator[DrawRecord]:
    """Watch client work on the calling thread: ``record.drew`` tells whether it drew from the global generator."""
    record = DrawRecord()
    before = getattr(_local, "record", None)
    _local.record = record
    try:
        yield record
    finally:
        _local.record = before


def seed_torch(seed: int) -> None:
    """``torch.manual_seed``, minus its lazy seeding calls for device types this machine does not have.

    Each of those calls formats a stack trace (~0.25 ms per client job on the CPU, ~1% of a micro-model round; on
    the first GPU machine 100 stack traces a 50-client round, with CUDA's own seeding ~80 ms of a ~0.2 s vectorised
    round under cProfile). Only the generators of devices that exist can ever be used, so seeding the CPU's and,
    where CUDA is there, every CUDA device's (what ``torch.manual_seed`` does for CUDA) is the same thing; another
    accelerator (MPS, XPU) takes ``torch.manual_seed`` itself.
    """
    if not torch.accelerator.is_available():
        torch.random.default_generator.manual_seed(seed)
    elif torch.cuda.is_available():
        torch.cuda.manual_seed_all(seed)
        torch.random.default_generator.manual_seed(seed)
    else:
        torch.manual_seed(seed)


def _note_if_changed(since: torch.Tensor) -> None:
    record: DrawRecord | None = getattr(_local, "record", None)
    if record is not None and not torch.equal(torch.random.get_rng_state(), since):
        record.drew = True


@contextmanager
def job_torch_rng(seed: int) -> Iterator[torch.Generator]:
    """Torch's global generator seeded with ``seed`` inside a fork, yielded; in a worker thread a private
    generator seeded with ``seed`` instead, and the global one is left alone."""
    if in_worker_thread():
        yield torch.Generator().manual_seed(seed)
        return
    with torch.random.fork_rng(devices=[]):
        seed_torch(seed)
        watched = getattr(_local, "record", None) is not None
        seeded = torch.random.get_rng_state() if watched else None
        yield torch.random.default_generator
        if seeded is not None:
            _note_if_changed(seeded)


@contextmanager
def cohort_rng() -> Iterator[None]:
    """Around a whole cohort: a fork of the global generator, so client work never disturbs the caller's random
    state. In a worker thread nothing: the executor keeps the caller's state and checks it after the wave."""
    if in_worker_thread():
        yield
        return
    with torch.random.fork_rng(devices=[]):
        watched = getattr(_local, "record", None) is not None
        entry = torch.random.get_rng_state() if watched else None
        yield
        if entry is not None:
            _note_if_changed(entry)


__all__ = ["DrawRecord", "cohort_rng", "in_worker_thread", "job_torch_rng", "recording_draws", "seed_torch",
           "worker_thread"]
