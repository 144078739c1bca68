"""The adapted pFL baselines of Tables 5.1-5.2 that change training or aggregation: PromptProx and PromptAMP.

(PromptFL+FT and PromptPer are evaluation-side: see :mod:`fedcore_pfedprompt.evaluators`.)
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import attrs
import torch

import fedcore
from fedcore.builtin import weighted_mean
from fedcore.settings import setting
from fedcore.stash import StashKey
from fedcore.types import AggregateResult, ClientUpdate
from fedcore_clip import PromptUpdate

LAST_SEEN = StashKey[dict]("promptamp.last_seen")
"""Server side: the last prompt each client uploaded (FedAMP keeps one model per client)."""


@attrs.frozen(eq=False, kw_only=True)
class PromptProx(PromptUpdate):
    """PromptProx (FedProx on the prompt): CE + (mu/2)·||P − P_global||², anchored at the downloaded prompt."""

    mu: float = setting(0.01, low=0.0, help="proximal coefficient (grid 0.001, 0.01, 0.1, 1)")

    def proximal_mu(self) -> float:
        return self.mu


@attrs.frozen(eq=False, kw_only=True)
class PromptAMP:
    """PromptAMP (FedAMP's attentive message passing on prompts, HeurFedAMP weights).

    Each client c gets its own cloud prompt ``u_c = ξ_cc·θ_c + Σ_{m≠c} ξ_cm·θ_m`` over the last prompt
    every client uploaded, with ``ξ_cc = self_weight`` and ``ξ_cm ∝ exp(sigma·cos(θ_c, θ_m))`` summing to
    ``1 − self_weight``; it is sent through ``AggregateResult.per_client`` (the prompt share applies it at
    the next dispatch). The global state is the uniform mean (what new clients start from).
    """

    self_weight: float = setting(0.5, low=0.0, high=1.0, help="ξ_cc")
    sigma: float = setting(5.0, low=0.0, help="similarity sharpness")

    def cloud_prompts(self, table: dict[int, dict[str, torch.Tensor]]) -> dict[int, dict[str, torch.Tensor]]:
        ids = sorted(table)
        keys = sorted(table[ids[0]])
        flat = torch.stack([torch.cat([table[c][k].flatten().double() for k in keys]) for c in ids])
        unit = torch.nn.functional.normalize(flat, dim=-1)
        sim = unit @ unit.t()
        out = {}
        for i, c in enumerate(ids):
            if len(ids) == 1:
                weights = torch.ones(1, dtype=torch.float64)
            else:
                others = torch.exp(self.sigma * sim[i])
                others[i] = 0.0
                weights = (1 - self.self_weight) * others / others.sum()
                weights[i] = self.self_weight
            mixed = weights @ flat
            view, pos = {}, 0
            for k in keys:
                ref = table[c][k]
                view[k] = mixed[pos:pos + ref.numel()].view_as(ref).to(ref.dtype)
                pos += ref.numel()
            out[c] = view
        return out

    @fedcore.hookimpl
    def fedcore_aggregate(self, model: Any, updates: Sequence[ClientUpdate], ctx: Any) -> AggregateResult:
        table = dict(ctx.server.stash.get(LAST_SEEN) or {})
        for u in updates:
            table[u.client_id] = {k: v.detach().clone() for k, v in u.tensors.items()}
        ctx.server.stash[LAST_SEEN] = table
        state = weighted_mean(updates, [1.0] * len(updates))
        return AggregateResult(state=state, per_client=self.cloud_prompts(table),
                               metrics={"clients_known": float(len(table))})
