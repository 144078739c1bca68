"""Update sanity before aggregation: a norm bound relative to the round's median update norm.

A finite but absurd update (one client sending its delta scaled by 1e30) passes the NaN/Inf check and, averaged
by FedAvg, makes the global model huge; every later honest update then overflows and is rejected. Before an
aggregation, each update's delta norm ``||tensors - base||`` (float64, floating entries) is compared with the
round's *lower* median delta norm (with two updates, the smaller: one honest client outvotes one attacker) and an
update more than ``bound`` times larger is rejected like a NaN update: listed under ``rejected`` in the round's row
and on the progress line, never averaged. ``bound = 0`` turns the check off. With one update the median is that
update, so a lone outlier is not caught: the check needs a peer to compare with; likewise when the median is 0
(most clients changed nothing) the check has no scale and rejects nothing.
"""
from __future__ import annotations

from collections.abc import Sequence
import math
import statistics
from typing import Any

import torch

from fedcore.runtime.workers import spread
from fedcore.types import ClientUpdate

DEFAULT_BOUND = 100.0
"""An update whose delta norm exceeds 100 x the round's lower median delta norm is rejected."""


def delta_norm(update: ClientUpdate) -> float:
    total = 0.0
    for name, value in update.tensors.items():
        if not isinstance(value, torch.Tensor) or not value.is_floating_point():
            continue
        base = update.base.get(name)
        delta = value.double() - base.double() if base is not None and base.shape == value.shape else value.double()
        total += float(torch.sum(delta * delta))
    return math.sqrt(total) if math.isfinite(total) else math.inf


def norm_outliers(updates: Sequence[ClientUpdate], bound: float) -> tuple[list[ClientUpdate], list[dict[str, Any]]]:
    """``(kept, rejected)``: ``rejected`` rows (``client``, ``reason``) for updates beyond ``bound`` x the median."""
    if bound <= 0 or len(updates) < 2:
        return list(updates), []
    norms = spread(delta_norm, updates, what="update-norm check")  # in the threads executor's idle workers
    median = statistics.median_low(norms)
    if not 0 < median < math.inf:  # no scale to compare with (most clients changed nothing): nothing is rejected
        return list(updates), []
    kept, rejected = [], []
    for update, norm in zip(updates, norms):
        if norm > bound * median:
            rejected.append({"client": update.client_id,
                             "reason": f"update norm {norm:.4g} is more than {bound:g} x the round's median "
                                       f"update norm {median:.4g}"})
        else:
            kept.append(update)
    return kept, rejected


__all__ = ["DEFAULT_BOUND", "delta_norm", "norm_outliers"]
