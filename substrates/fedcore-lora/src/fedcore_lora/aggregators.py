"""Aggregators for LoRA factors: staleness-aware mean, and the mean of products re-factorised by SVD.

``staleness-mean``: each update is first pulled toward the current global value by its staleness
discount, ``x̃_i = g + s(τ_i) (x_i − g)``, then the sample-weighted mean of the ``x̃_i`` is the new global
value. With one update this is FedAsync's mixing ``g' = (1 − α s(τ)) g + α s(τ) x`` at α = 1 (Xie, Koyejo,
Gupta, 2019, Eq. 2 and §5.2); s(τ) = (1+τ)^(-1/2) by default, FedBuff's choice (Nguyen et al., AISTATS
2022). A stale update therefore never overwrites fresh factors: its weight in the result is p_i·s(τ_i),
the rest stays on the current global value. Fresh updates (τ = 0) are averaged exactly as FedAvg does.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

import attrs
import torch
from torch import nn

import fedcore
from fedcore.builtin import staleness_weight, weighted_mean
from fedcore.settings import setting
from fedcore.types import AggregateResult, ClientUpdate
from fedcore_lora.adapters import factor_pairs
from fedcore_lora.rank import product_mean

STALENESS = ("constant", "polynomial", "hinge")


@attrs.frozen(eq=False, kw_only=True)
class StalenessMean:
    """Sample-weighted mean in which a stale update counts s(τ) and the current global value keeps the rest."""

    staleness: str = setting("polynomial", choices=STALENESS, help="staleness discount s(τ) (FedAsync §5.2)")
    a: float = setting(0.5, low=0.0, help="exponent of the polynomial s(τ) = (1+τ)^-a; slope of the hinge")
    b: float = setting(4.0, low=0.0, help="the hinge's free staleness")

    @fedcore.hookimpl
    def fedcore_aggregate(self, model: nn.Module, updates: Sequence[ClientUpdate], ctx: fedcore.RoundContext
                          ) -> AggregateResult:
        weights = [float(u.num_examples) for u in updates]
        discounts = [staleness_weight(self.staleness, u.staleness, a=self.a, b=self.b) for u in updates]
        if all(s == 1.0 for s in discounts):
            return AggregateResult(state=weighted_mean(updates, weights))
        own = model.state_dict()
        pulled = [attrs.evolve(u, tensors={k: _toward(own.get(k), v, s) for k, v in u.tensors.items()})
                  for u, s in zip(updates, discounts)]
        return AggregateResult(state=weighted_mean(pulled, weights),
                               metrics={"mean_discount": float(sum(discounts) / len(discounts))})


def _toward(current: torch.Tensor | None, value: torch.Tensor, discount: float) -> torch.Tensor:
    if discount == 1.0 or current is None or not value.is_floating_point() or current.shape != value.shape:
        return value
    g = current.to(torch.float64)
    return (g + discount * (value.to(torch.float64) - g)).to(value.dtype)


@attrs.frozen(eq=False, kw_only=True)
class ProductSVD:
    """Average the products ``B A`` (exact mean, Eq. 9), re-factorised at the round's rank by SVD; other
    entries by the sample-weighted mean."""

    needs_individual_updates: ClassVar[bool] = True
    """The mean of the products B A is not the product of the means: one combined update would not do."""

    @fedcore.hookimpl
    def fedcore_aggregate(self, model: nn.Module, updates: Sequence[ClientUpdate], ctx: fedcore.RoundContext
                          ) -> AggregateResult:
        weights = [float(u.num_examples) for u in updates]  # p_s = |D_s| / |D| (Eq. 3, Eq. 9)
        state = weighted_mean(updates, weights)
        for b_key, a_key in factor_pairs(list(state)).values():
            pairs = [(u.tensors[b_key], u.tensors[a_key]) for u in updates]
            state[b_key], state[a_key] = product_mean(pairs, weights, rank=pairs[0][1].shape[0])
        return AggregateResult(state=state)
