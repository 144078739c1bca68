"""FedAvg aggregation (McMahan et al., 2017): the sample-weighted mean of the uploaded entries."""
from __future__ import annotations

from collections.abc import Sequence

import attrs
import torch
from torch import nn

import fedcore
from fedcore.contexts import RoundContext
from fedcore.settings import setting
from fedcore.types import AggregateResult, ClientUpdate, TensorDict


def weighted_mean(updates: Sequence[ClientUpdate], weights: Sequence[float]) -> TensorDict:
    """Per entry, the weighted mean over the updates that carry it; inputs are never modified.

    Floating entries are averaged in float64 and cast back; non-floating entries (counters) take the
    value of the heaviest update that carries them.
    """
    out: TensorDict = {}
    keys = sorted({k for u in updates for k in u.tensors})
    for key in keys:
        holders = [(u.tensors[key], w) for u, w in zip(updates, weights) if key in u.tensors]
        first = holders[0][0]
        if not first.is_floating_point():
            out[key] = max(holders, key=lambda h: h[1])[0].clone()
            continue
        total = sum(w for _, w in holders)
        acc = torch.zeros_like(first, dtype=torch.float64)
        for tensor, w in holders:
            acc.add_(tensor.to(torch.float64), alpha=w / total)
        out[key] = acc.to(first.dtype)
    return out


@attrs.frozen(eq=False, kw_only=True)
class FedAvg:
    """Weighted mean of client entries; ``weighting="samples"`` (default) or ``"uniform"``."""

    weighting: str = setting("samples", choices=("samples", "uniform"),
                              help="weight each update by its sample count, or equally")

    @fedcore.hookimpl
    def fedcore_aggregate(
        self, model: nn.Module, updates: Sequence[ClientUpdate], ctx: RoundContext
    ) -> AggregateResult:
        weights = [float(u.num_examples) if self.weighting == "samples" else 1.0 for u in updates]
        return AggregateResult(state=weighted_mean(updates, weights))
