"""FedBuff (Nguyen et al., AISTATS 2022): buffered asynchronous aggregation of client deltas.

``BufferedSchedule`` (schedule slot) keeps ``concurrency`` clients busy and aggregates once ``K``
updates are in the buffer, whatever their staleness; ``FedBuffStep`` (aggregate slot) is the
server step ``w <- w + η_g · (1/K) Σ s(τ_i) Δ_i`` with Δ_i = client's new value - what it started
from, applied to the *current* model. Float buffers (BatchNorm statistics) are not stepped: they take
the convex mean of the uploaded values (``fedcore.builtin.buffers``).
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

import attrs
import numpy as np
import torch
from torch import nn

import fedcore
from fedcore.builtin.buffers import convex_mean, float_buffer_names
from fedcore.builtin.continuous_policy import ContinuousRounds, resolve_concurrency
from fedcore.builtin.staleness import STALENESS_FUNCTIONS, staleness_weight
from fedcore.contexts import RoundContext, RunContext
from fedcore.errors import ConfigError
from fedcore.settings import setting
from fedcore.types import AggregateResult, ClientInfo, ClientUpdate, TensorDict


@attrs.define(kw_only=True)
class BufferedRounds(ContinuousRounds):
    """Policy: keep ``concurrency`` clients training; aggregate when ``buffer_size`` updates arrived."""

    buffer_size: int

    def ready(self, *, now: float, arrived: Sequence[ClientUpdate], busy: Sequence[int], since: float) -> bool:
        return len(arrived) >= self.buffer_size


@attrs.frozen(eq=False, kw_only=True)
class BufferedSchedule:
    """FedBuff's schedule: ``concurrency`` clients in flight, aggregate every ``buffer_size`` arrivals."""

    asynchronous: ClassVar[bool] = True  # aggregates before all dispatched clients answered

    buffer_size: int = setting(10, low=1, help="K: updates per aggregation")
    concurrency: int | None = setting(None, kind=int, low=1, optional=True,
                                      help="clients training at once (default: all)")
    max_staleness: int | None = setting(None, kind=int, low=0, optional=True,
                                         help="drop updates staler than this (None = keep all)")

    @classmethod
    def __fedcore_checks__(cls) -> Any:  # how the contract checks build and run it (fedcore.testing.CheckPlan)
        from fedcore.testing import CheckPlan

        return CheckPlan(presets=[cls(buffer_size=2)])  # the default waits for 10 arrivals; the fixture has 3 clients

    @fedcore.hookimpl
    def fedcore_make_scheduler(self, clients: Sequence[ClientInfo], run: RunContext) -> BufferedRounds:
        n = len(clients)
        if self.buffer_size > n:
            raise ConfigError(f"BufferedSchedule.buffer_size={self.buffer_size} waits for more arrivals than the "
                              f"{n} clients")
        concurrency = resolve_concurrency("BufferedSchedule", self.concurrency, clients)
        if self.buffer_size > concurrency:
            raise ConfigError(f"BufferedSchedule.buffer_size={self.buffer_size} is more than concurrency="
                              f"{concurrency}: the buffer could never fill")
        return BufferedRounds(buffer_size=self.buffer_size, concurrency=concurrency, max_staleness=self.max_staleness)


@attrs.frozen(eq=False, kw_only=True)
class FedBuffStep:
    """FedBuff's server step on deltas, discounted by staleness (``s(τ) = 1/sqrt(1+τ)`` by default)."""


    server_lr: float = setting(1.0, low=0.0, low_open=True, help="η_g")
    staleness: str = setting("polynomial", choices=STALENESS_FUNCTIONS, help="staleness discount s(τ)")
    a: float = setting(0.5, low=0.0, help="polynomial exponent / hinge slope")
    b: float = setting(4.0, low=0.0, help="hinge threshold")
    weighting: str = setting("uniform", choices=("uniform", "samples"), help="1/K (paper) or sample-weighted")

    @fedcore.hookimpl
    def fedcore_aggregate(
        self, model: nn.Module, updates: Sequence[ClientUpdate], ctx: RoundContext
    ) -> AggregateResult:
        current = model.state_dict()
        s = [staleness_weight(self.staleness, u.staleness, a=self.a, b=self.b) for u in updates]
        if self.weighting == "samples":
            total = float(sum(u.num_examples for u in updates))
            w = [si * u.num_examples / total for si, u in zip(s, updates)]
        else:
            w = [si / len(updates) for si in s]
        buffers = float_buffer_names(model)
        out: TensorDict = convex_mean(updates, w, buffers)  # BatchNorm statistics: no deltas (see buffers.py)
        for key in sorted({k for u in updates for k in u.tensors} - buffers):
            holders = [(u, wi) for u, wi in zip(updates, w) if key in u.tensors]
            first = holders[0][0].tensors[key]
            if not first.is_floating_point():
                out[key] = max(holders, key=lambda h: h[0].num_examples)[0].tensors[key].clone()
                continue
            step = torch.zeros_like(first, dtype=torch.float64)
            for u, wi in holders:
                if key not in u.base:
                    raise KeyError(f"FedBuffStep needs the base of {key!r} from client {u.client_id} to form its delta")
                step.add_(u.tensors[key].to(torch.float64) - u.base[key].to(torch.float64), alpha=wi)
            if len(holders) < len(updates):  # the mean is over the buffer; entries some clients lack use their holders
                step.mul_(len(updates) / len(holders))
            out[key] = (current[key].to(torch.float64) + self.server_lr * step).to(first.dtype)
        return AggregateResult(state=out, metrics={"mean_staleness_weight": float(np.mean(s))})
