"""Counts the samples a client's module really processed during its job (the cost model's work unit).

A forward pre-hook on the share's top-level module adds the leading dimension of the first tensor
argument: to ``train_samples`` when autograd records (training forward + backward follows), to
``eval_samples`` otherwise (scoring, inference). The hook is removed before the job returns, so the
module stays picklable.

A cohort trainer that runs many clients' forwards through one batched call (the vectorised cohorts)
books each client's samples itself: inside :func:`uncounted` the hooks count nothing, and
:func:`book_samples` adds to the meter of the client's own module exactly what its hook would have.
"""
from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any
import weakref

import torch
from torch import nn


def _leading(args: tuple[Any, ...], kwargs: dict[str, Any]) -> int:
    for value in list(args) + list(kwargs.values()):
        if isinstance(value, torch.Tensor) and value.dim() > 0:
            return int(value.shape[0])
    return 0


_PAUSED: ContextVar[bool] = ContextVar("fedcore_meter_paused", default=False)
_METERS: weakref.WeakKeyDictionary[nn.Module, dict[str, int]] = weakref.WeakKeyDictionary()


def _book(work: dict[str, int], n: int, train: bool) -> None:
    work["train_samples" if train else "eval_samples"] += n
    work["max_batch"] = max(work["max_batch"], n)
    work["forward_calls"] += 1


@contextmanager
def count_samples(module: nn.Module) -> Iterator[dict[str, int]]:
    """``with count_samples(share.module) as work: ...`` -> ``work["train_samples"]`` etc."""
    work = {"train_samples": 0, "eval_samples": 0, "max_batch": 0, "forward_calls": 0}

    def hook(mod: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        if not _PAUSED.get():
            _book(work, _leading(args, kwargs), torch.is_grad_enabled() and mod.training)

    handle = module.register_forward_pre_hook(hook, with_kwargs=True)
    _METERS[module] = work
    try:
        yield work
    finally:
        handle.remove()
        _METERS.pop(module, None)


@contextmanager
def uncounted() -> Iterator[None]:
    """No meter counts a forward inside this block (a batched call over many clients' modules)."""
    token = _PAUSED.set(True)
    try:
        yield
    finally:
        _PAUSED.reset(token)


def book_samples(module: nn.Module, n: int, *, train: bool = True) -> None:
    """Count one forward of ``n`` samples on ``module``'s meter, as its hook would have; no-op when none is on."""
    work = _METERS.get(module)
    if work is not None:
        _book(work, n, train)
