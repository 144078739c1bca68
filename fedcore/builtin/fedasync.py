"""FedAsync (Xie, Koyejo, Gupta, 2019): aggregate on every arrival, mixing with a staleness-discounted weight.

Two components, usable apart: ``AsyncSchedule`` (the schedule slot) keeps ``concurrency`` clients
busy and aggregates on each arrival, handing the update's staleness to whatever aggregator the
pipeline has; ``FedAsyncMix`` (the aggregate slot) is the paper's server update
``w <- (1 - α s(τ)) w + α s(τ) x_new``.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

import attrs
import numpy as np
import torch

import fedcore
from fedcore.builtin.continuous_policy import ContinuousRounds, resolve_concurrency
from fedcore.builtin.fedavg import weighted_mean
from fedcore.builtin.staleness import STALENESS_FUNCTIONS, staleness_weight
from fedcore.settings import setting
from fedcore.types import AggregateResult, ClientInfo, ClientUpdate, TensorDict


@attrs.define(kw_only=True)
class AsyncRounds(ContinuousRounds):
    """Policy: keep ``concurrency`` clients training; aggregate each arrival alone."""

    def ready(self, *, now: float, arrived: Sequence[ClientUpdate], busy: Sequence[int], since: float) -> bool:
        return len(arrived) >= 1


@attrs.frozen(eq=False, kw_only=True)
class AsyncSchedule:
    """Fully asynchronous schedule (FedAsync; Co-S2P(Async.)): one aggregation per arriving update."""

    asynchronous: ClassVar[bool] = True  # aggregates before all dispatched clients answered

    concurrency: int | None = setting(None, kind=int, low=1, optional=True,
                                      help="clients training at once (default: all)")
    max_staleness: int | None = setting(None, kind=int, low=0, optional=True,
                                        help="drop updates staler than this (default: keep all)")

    @fedcore.hookimpl
    def fedcore_make_scheduler(self, clients: Sequence[ClientInfo], run: Any) -> AsyncRounds:
        return AsyncRounds(concurrency=resolve_concurrency("AsyncSchedule", self.concurrency, clients),
                           max_staleness=self.max_staleness)


def mix(current: TensorDict, target: TensorDict, alpha: float) -> TensorDict:
    """``(1 - alpha)·current + alpha·target`` per floating entry (float64 math); others take ``target``."""
    out: TensorDict = {}
    for k, v in target.items():
        cur = current[k]
        if not v.is_floating_point():
            out[k] = v.clone()
            continue
        out[k] = (cur.to(torch.float64) * (1.0 - alpha) + v.to(torch.float64) * alpha).to(v.dtype)
    return out


@attrs.frozen(eq=False, kw_only=True)
class FedAsyncMix:
    """FedAsync's server update: mix the current model with the arrival by ``α·s(τ)``.

    Several simultaneous arrivals are first averaged with weights ``n_i·s(τ_i)``; the mixing weight
    is then ``α`` times the sample-weighted mean of ``s(τ_i)`` (exactly the paper's rule for one).
    """


    alpha: float = setting(0.6, low=0.0, high=1.0, low_open=True, help="mixing weight α")
    staleness: str = setting("polynomial", choices=STALENESS_FUNCTIONS, help="staleness discount s(τ)")
    a: float = setting(0.5, low=0.0, help="polynomial exponent / hinge slope")
    b: float = setting(4.0, low=0.0, help="hinge threshold")

    @classmethod
    def __fedcore_checks__(cls) -> Any:  # how the contract checks build and run it (fedcore.testing.CheckPlan)
        from fedcore.testing import CheckPlan

        return CheckPlan(expected_failures=lambda mix: {
            "check_aggregate_identity": "FedAsync mixes the arrival into the current model by alpha < 1, so identical "
                                        "updates move the model only part of the way"} if mix.alpha < 1 else {})

    @fedcore.hookimpl
    def fedcore_aggregate(self, model: Any, updates: Sequence[ClientUpdate], ctx: Any) -> AggregateResult:
        s = [staleness_weight(self.staleness, u.staleness, a=self.a, b=self.b) for u in updates]
        n = [float(u.num_examples) for u in updates]
        target = weighted_mean(updates, [ni * si for ni, si in zip(n, s)])
        alpha = self.alpha * sum(ni * si for ni, si in zip(n, s)) / sum(n)
        current = model.state_dict()
        return AggregateResult(state=mix(current, target, alpha),
                               metrics={"mix_alpha": alpha,
                                        "mean_staleness": float(np.mean([u.staleness for u in updates]))})
