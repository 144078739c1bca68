"""What an aggregate must pass before it replaces the global model.

A structural mismatch (an entry the model does not have, a changed shape) is a bug in the component:
an :class:`~fedcore.errors.AggregateError` naming it stops the run. A numerical fault (NaN or Inf in any
entry, a negative running variance) can come from the data, a learning rate or stale deltas: the engine
reports the round (``aggregate_fault`` in its history row, a warning naming the component) and keeps
the old model, so one bad round does not poison every later one.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from fedcore.errors import AggregateError

if TYPE_CHECKING:
    from fedcore.pipeline import Pipeline

VARIANCE_BUFFER = "running_var"
"""Entries named ``*.running_var`` (BatchNorm's running variance) must never be negative."""


def _label(component: Any) -> str:
    from fedcore.plugins import registry  # only to word an error: a run that goes well never needs the catalogue

    entry = registry().find(component)
    return entry.name if entry is not None else type(component).__name__


def aggregate_component(pipeline: Pipeline) -> str:
    """The pipeline's ``aggregate`` provider by its registered name (else its class), with its wrappers."""
    impls = pipeline.plugin_manager.hook.fedcore_aggregate.get_hookimpls()
    provider = ", ".join(_label(i.plugin) for i in impls if not i.wrapper)
    wrappers = [_label(i.plugin) for i in impls if i.wrapper]
    return provider + (f" (wrapped by {', '.join(wrappers)})" if wrappers else "")


def check_fit(model: nn.Module, state: Mapping[str, torch.Tensor], pipeline: Pipeline) -> None:
    """Every entry of ``state`` names an entry of ``model`` with the same shape, or an AggregateError naming the
    pipeline's aggregate component (looked up only then: the plugin catalogue stays out of the round)."""
    own = model.state_dict()
    unknown = sorted(set(state) - set(own))
    if unknown:
        raise AggregateError(f"the aggregate from {aggregate_component(pipeline)} names entries the global model "
                             f"does not have: {unknown[:8]}")
    for k, v in state.items():
        if own[k].shape != v.shape:
            raise AggregateError(f"the aggregate from {aggregate_component(pipeline)}: entry {k!r} has shape "
                                 f"{tuple(v.shape)}, the global model has {tuple(own[k].shape)}")


def numeric_problem(state: Mapping[str, torch.Tensor]) -> str | None:
    """The first numerical fault of ``state`` in name order (NaN/Inf, a negative variance), or ``None``."""
    for k in sorted(state):
        v = state[k]
        if not v.is_floating_point():
            continue
        finite = torch.isfinite(v)
        if not bool(finite.all()):
            nan = int(torch.isnan(v).sum())
            return f"entry {k!r} has {nan} NaN and {int((~finite).sum()) - nan} infinite values of {v.numel()}"
        if k.rsplit(".", 1)[-1] == VARIANCE_BUFFER and v.numel() and bool((v < 0).any()):
            return f"variance entry {k!r} is negative (min {float(v.min()):.4g})"
    return None


__all__ = ["VARIANCE_BUFFER", "aggregate_component", "check_fit", "numeric_problem"]
