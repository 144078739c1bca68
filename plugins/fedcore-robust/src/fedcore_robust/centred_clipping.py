"""Centred clipping (Karimireddy, He, Jaggi, ICML 2021, "Learning from History for Byzantine Robust
Optimization", Eq. (CC) in §4).

Starting from the previous aggregate ``v₀`` (the server's memory of where the honest majority went), L times::

    v_{l+1} = v_l + (1/n) Σᵢ (Δᵢ − v_l) · min(1, τ / ||Δᵢ − v_l||)

and the result ``v_L`` moves the current model. A change far from ``v`` counts at most ``τ``, so f Byzantine
clients move the aggregate by at most ``f τ / n`` per iteration whatever they send. ``v`` is kept in the server
stash (``robust.centred-clipping``): checkpoints carry it, a resumed run continues bit for bit. The clients' changes
here play the part of the paper's worker momenta (clients that run local momentum SGD send exactly that).

Float buffers take the same per-client weights ``cᵢ = min(1, τ/||Δᵢ − v_L-1||)/n`` around the current value:
``b + Σ cᵢ (bᵢ − b)``, a convex combination of the current and the uploaded statistics.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

import attrs
import torch
from torch import nn

import fedcore
from fedcore import RoundContext, StashKey
from fedcore.settings import setting
from fedcore.types import AggregateResult, ClientUpdate, TensorDict
from fedcore_robust.changes import applied, client_changes, counters

CENTRE = StashKey[Any]("robust.centred-clipping")
"""The previous aggregate change ``v`` (a flat float64 tensor), or absent before the first aggregation."""


def centred_clip(rows: torch.Tensor, start: torch.Tensor, tau: float, iterations: int
                 ) -> tuple[torch.Tensor, torch.Tensor]:
    """``(v_L, c)``: the clipped centre after ``iterations`` steps and the last step's row weights ``min(1, τ/d)``."""
    v = start.clone()
    weights = torch.ones(rows.shape[0], dtype=torch.float64, device=rows.device)
    for _ in range(iterations):
        diff = rows - v
        norms = diff.norm(dim=1)
        weights = torch.clamp(tau / norms.clamp_min(1e-300), max=1.0)
        v = v + (diff * weights[:, None]).mean(dim=0)
    return v, weights


@attrs.frozen(eq=False, kw_only=True)
class CentredClipping:
    """Centred clipping (Karimireddy et al., 2021): clip each change to radius τ around the previous aggregate."""

    needs_individual_updates: ClassVar[bool] = True
    """It clips each client's change separately: one combined update would not do."""

    tau: float = setting(1.0, low=0.0, low_open=True, help="τ: clipping radius around the previous aggregate change")
    iterations: int = setting(1, low=1, help="L: clipping iterations per aggregation (the paper finds 1 enough)")

    @fedcore.hookimpl
    def fedcore_aggregate(self, model: nn.Module, updates: Sequence[ClientUpdate], ctx: RoundContext
                          ) -> AggregateResult:
        changes = client_changes(model, updates, "centred-clipping")
        previous = ctx.server.stash.get(CENTRE)
        start = previous.to(changes.rows.device) if isinstance(previous, torch.Tensor) \
            and previous.shape == changes.rows.shape[1:] \
            else torch.zeros(changes.rows.shape[1], dtype=torch.float64, device=changes.rows.device)
        v, weights = centred_clip(changes.rows, start, self.tau, self.iterations)
        ctx.server.stash[CENTRE] = v
        state: TensorDict = applied(model, changes, v)
        current = model.state_dict()
        n = len(updates)
        for key in changes.buffers:
            base = current[key].to(torch.float64)
            acc = base.clone()
            for i, u in enumerate(updates):
                if key in u.tensors:
                    acc += (weights[i] / n) * (u.tensors[key].to(torch.float64) - base)
            state[key] = acc.to(current[key].dtype)
        state.update(counters(updates, range(n)))
        return AggregateResult(state=state, metrics={"clipped": float((weights < 1.0).double().mean()),
                                                     "centre_norm": float(v.norm())})
