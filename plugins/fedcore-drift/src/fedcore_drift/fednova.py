"""FedNova (Wang et al., NeurIPS 2020, "Tackling the Objective Inconsistency Problem ..."): normalised averaging.

Client i takes τ_i local SGD steps (unequal: τ_i = epochs · ⌈n_i / B⌉) from x with momentum ρ; its change is
``y_i − x = −η G_i a_i`` with ``‖a_i‖₁ = τ_i`` for plain SGD and ``‖a_i‖₁ = [τ_i − ρ(1 − ρ^τ_i)/(1 − ρ)] / (1 − ρ)``
with momentum (§4 and Appendix of the paper). The normalised direction is ``d_i = G_i a_i / ‖a_i‖₁ =
(x − y_i) / (η ‖a_i‖₁)``, and the server step (the paper's generalised update ``x ← x − τ_eff η Σ w_i d_i``
with FedNova's choices ``w_i = p_i`` and ``τ_eff = Σ_i p_i ‖a_i‖₁``) is

    x ← x − τ_eff η Σ_i p_i d_i  =  x + (Σ_i p_i ‖a_i‖₁) · Σ_i p_i (y_i − x) / ‖a_i‖₁,

with ``p_i = n_i / Σ_{j∈S} n_j`` over the clients aggregated. η cancels, so the server needs only each
client's ``‖a_i‖₁``: it comes up as ``fednova.a`` (one float, ledger kind ``fednova_norm``). With equal
``‖a_i‖₁`` it is FedAvg. Under the buffered and semi-asynchronous schedules the same rule runs over the arrivals of
one aggregation (each change from the version it started from); under FedAsync's one-arrival aggregation it would
reduce to that client's raw change, so ``fednova`` refuses ``schedule = "async"``.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

import attrs
import torch
from torch import nn

import fedcore
from fedcore import RoundContext
from fedcore.builtin import AsyncSchedule
from fedcore.errors import ConfigError
from fedcore.settings import setting
from fedcore.types import AggregateResult, ClientData, ClientInfo, ClientState, ClientUpdate, Share
from fedcore_drift.changes import changes, client_weights, move
from fedcore_drift.training import train_with_linear_term

A = "fednova.a"
"""‖a_i‖₁: the client's effective number of local steps, uploaded as one float."""


def effective_steps(steps: int, momentum: float) -> float:
    """``‖a_i‖₁`` of ``steps`` SGD steps with momentum ρ: τ for ρ = 0, ``[τ − ρ(1 − ρ^τ)/(1 − ρ)]/(1 − ρ)`` else."""
    if momentum == 0.0:
        return float(steps)
    rho = momentum
    return (steps - rho * (1.0 - rho**steps) / (1.0 - rho)) / (1.0 - rho)


@attrs.frozen(eq=False, kw_only=True)
class FedNovaUpdate:
    """FedNova's client: local SGD (momentum ρ allowed) that reports its ``‖a_i‖₁`` with the change."""

    fednova_client: ClassVar[bool] = True

    lr: float = setting(0.05, low=0.0, low_open=True, help="η: the local learning rate")
    epochs: int = setting(1, low=1, help="local epochs (τ_i = epochs · batches: unequal across clients)")
    batch_size: int = setting(32, low=1, help="minibatch size")
    momentum: float = setting(0.0, low=0.0, high=1.0, high_open=True, help="ρ: SGD momentum")

    @fedcore.hookimpl
    def fedcore_local_update(self, client: ClientInfo, share: Share, data: ClientData, state: ClientState,
                             ctx: RoundContext) -> ClientUpdate:
        trained = train_with_linear_term(share.module, data, linear=None, epochs=self.epochs, lr=self.lr,
                                         batch_size=self.batch_size, momentum=self.momentum,
                                         generator=ctx.rng("shuffle"))
        a = effective_steps(trained.steps, self.momentum)
        update = ClientUpdate.from_share(share, num_examples=len(data),
                                         metrics={"loss": trained.loss, "local_steps": float(trained.steps)})
        return attrs.evolve(update, aux={A: torch.tensor([a], dtype=torch.float64)})


@attrs.frozen(eq=False, kw_only=True)
class FedNovaAggregate:
    """FedNova's server: ``x ← x + τ_eff Σ p_i (y_i − x)/‖a_i‖₁`` with ``τ_eff = Σ p_i ‖a_i‖₁``."""

    @classmethod
    def __fedcore_checks__(cls) -> Any:  # how the contract checks build and run it (fedcore.testing.CheckPlan)
        from fedcore.testing import CHECK_FIXTURE, CheckPlan

        return CheckPlan(fixture=attrs.evolve(CHECK_FIXTURE, companions=[FedNovaUpdate()]))

    @fedcore.hookimpl
    def fedcore_check_pipeline(self, pipeline: Any) -> None:
        local = pipeline.provider("local_update")
        if not getattr(type(local), "fednova_client", False):
            raise ConfigError(f"fednova normalises by the local steps its clients report; local_update is "
                              f"{type(local).__name__}: use local_update = \"fednova-sgd\"")
        if isinstance(pipeline.provider("schedule"), AsyncSchedule):
            raise ConfigError("fednova normalises across the clients of one aggregation; FedAsync aggregates one "
                              "arrival at a time, where it is that client's raw change: use schedule = \"buffered\"")

    @fedcore.hookimpl
    def fedcore_run_start(self, run: Any) -> None:
        run.server.aux.declare(A, kind="fednova_norm")

    @fedcore.hookimpl
    def fedcore_aggregate(self, model: nn.Module, updates: Sequence[ClientUpdate], ctx: RoundContext
                          ) -> AggregateResult:
        deltas = changes(model, updates, "fednova")
        p = client_weights(updates, "samples")
        # An update without ‖a_i‖₁ (not from fednova-sgd; the pipeline check refuses that pairing) counts one step.
        a = [float(u.aux[A].reshape(-1)[0]) if A in u.aux else 1.0 for u in updates]
        if any(ai <= 0 for ai in a):
            raise ConfigError(f"fednova: a client reported ‖a_i‖₁ = {min(a)} local steps; every client must step")
        tau_eff = sum(pi * ai for pi, ai in zip(p, a, strict=True))
        state = move(model, updates, deltas, [tau_eff * pi / ai for pi, ai in zip(p, a, strict=True)])
        return AggregateResult(state=state, metrics={"tau_eff": tau_eff})
