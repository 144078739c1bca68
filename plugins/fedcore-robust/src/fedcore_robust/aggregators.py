"""Coordinate-wise trimmed mean and median (Yin, Chen, Ramchandran, Bartlett, ICML 2018, Definitions 1 and 2).

Both are unweighted, as in the paper: a Byzantine client could otherwise claim a huge ``num_examples``
and buy itself weight. Each coordinate of each entry is treated independently: the values the ``m``
clients sent are sorted, and either the ``floor(beta*m)`` largest and smallest are dropped before
averaging (trimmed mean) or the middle value is taken (median; the mean of the two middle values when
``m`` is even). Computed in float64 and cast back to the entry's dtype.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

import attrs
import torch
from torch import nn

import fedcore
from fedcore import RoundContext
from fedcore.settings import setting
from fedcore.types import AggregateResult, ClientUpdate, TensorDict


def _stacked(updates: Sequence[ClientUpdate]) -> dict[str, tuple[torch.Tensor, torch.dtype] | torch.Tensor]:
    """Per entry: the clients' values stacked on a new dim 0 in float64, or the value to keep for non-float entries."""
    out: dict[str, Any] = {}
    for key in sorted({k for u in updates for k in u.tensors}):
        values = [u.tensors[key] for u in updates if key in u.tensors]
        if not values[0].is_floating_point():  # counters such as BatchNorm's num_batches_tracked
            out[key] = max(values, key=lambda v: int(v.max()) if v.numel() else 0).clone()
            continue
        out[key] = (torch.stack([v.to(torch.float64) for v in values]), values[0].dtype)
    return out


def trimmed_mean(updates: Sequence[ClientUpdate], beta: float) -> TensorDict:
    """Per coordinate, the mean of the values left after dropping the ``floor(beta*m)`` largest and smallest."""
    if not 0.0 <= beta < 0.5:
        raise ValueError(f"beta={beta!r}; must be in [0, 0.5)")
    out: TensorDict = {}
    for key, item in _stacked(updates).items():
        if isinstance(item, torch.Tensor):
            out[key] = item
            continue
        stack, dtype = item
        m = stack.shape[0]
        k = int(beta * m)  # floor; m - 2k >= 1 because beta < 0.5
        kept = stack.sort(dim=0).values[k:m - k]
        out[key] = kept.mean(dim=0).to(dtype)
    return out


def coordinate_median(updates: Sequence[ClientUpdate]) -> TensorDict:
    """Per coordinate, the median of the clients' values (mean of the two middle values for an even count)."""
    out: TensorDict = {}
    for key, item in _stacked(updates).items():
        if isinstance(item, torch.Tensor):
            out[key] = item
            continue
        stack, dtype = item
        m = stack.shape[0]
        ordered = stack.sort(dim=0).values
        mid = ordered[(m - 1) // 2] if m % 2 else 0.5 * (ordered[m // 2 - 1] + ordered[m // 2])
        out[key] = mid.to(dtype)
    return out


@attrs.frozen(eq=False, kw_only=True)
class TrimmedMean:
    """Coordinate-wise beta-trimmed mean (Yin et al., 2018): robust to up to ``floor(beta*m)`` bad clients per side.

    The trimmed mean of Def. 2 in the paper.
    """

    needs_individual_updates: ClassVar[bool] = True
    """It ranks each client's value per coordinate: one combined update would not do."""

    beta: float = setting(0.1, low=0.0, high=0.5, high_open=True,
                          help="fraction of the clients' values dropped at each end, per coordinate")

    @fedcore.hookimpl
    def fedcore_aggregate(
        self, model: nn.Module, updates: Sequence[ClientUpdate], ctx: RoundContext
    ) -> AggregateResult:
        m = len(updates)
        return AggregateResult(state=trimmed_mean(updates, self.beta),
                               metrics={"trimmed_per_side": float(int(self.beta * m))})


@attrs.frozen(eq=False, kw_only=True)
class CoordinateMedian:
    """Coordinate-wise median (Yin et al., 2018, Def. 1): tolerates any minority of bad values per coordinate."""

    needs_individual_updates: ClassVar[bool] = True
    """It ranks each client's value per coordinate: one combined update would not do."""

    @fedcore.hookimpl
    def fedcore_aggregate(
        self, model: nn.Module, updates: Sequence[ClientUpdate], ctx: RoundContext
    ) -> AggregateResult:
        return AggregateResult(state=coordinate_median(updates))
