"""Counts the samples a client's module really processed during its job (the cost model's work unit).

A forward pre-hook on the share's top-level module adds the leading dimension of the first tensor
argument: to ``train_samples`` when autograd records (training forward + backward follows), to
``eval_samples`` otherwise (scoring, inference). The hook is removed before the job returns, so the
module stays picklable.
"""
from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch
from torch import nn


def _leading(args: tuple[Any, ...], kwargs: dict[str, Any]) -> int:
    for value in list(args) + list(kwargs.values()):
        if isinstance(value, torch.Tensor) and value.dim() > 0:
            return int(value.shape[0])
    return 0


@contextmanager
def count_samples(module: nn.Module) -> Iterator[dict[str, int]]:
    """``with count_samples(share.module) as work: ...`` -> ``work["train_samples"]`` etc."""
    work = {"train_samples": 0, "eval_samples": 0, "max_batch": 0, "forward_calls": 0}

    def hook(mod: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        n = _leading(args, kwargs)
        key = "train_samples" if torch.is_grad_enabled() and mod.training else "eval_samples"
        work[key] += n
        work["max_batch"] = max(work["max_batch"], n)
        work["forward_calls"] += 1

    handle = module.register_forward_pre_hook(hook, with_kwargs=True)
    try:
        yield work
    finally:
        handle.remove()
