"""Server optimisers over the averaged client change Δ (Reddi et al., ICLR 2021, Alg. 2; Hsu et al., 2019).

Each is an aggregator: it forms Δ (:mod:`fedcore_optim.change`), updates its moments and moves the current
global model, ``x ← x + move``:

* FedAvgM:    ``m ← β m + Δ``;                                       ``move = η m``
* FedAdam:    ``m ← β₁ m + (1−β₁) Δ``, ``v ← β₂ v + (1−β₂) Δ²``;        ``move = η_t m / (√v + τ)``
* FedYogi:    ``m`` as Adam, ``v ← v − (1−β₂) Δ² sign(v − Δ²)``;      ``move = η m / (√v + τ)``
* FedAdagrad: ``m`` as Adam, ``v ← v + Δ²``;                          ``move = η m / (√v + τ)``

with ``m₋₁ = 0`` and ``v₋₁ = τ²`` (Alg. 2 asks for ``v₋₁ ≥ τ²``; ``initial_v = 0`` is Flower's start). ``η_t`` is
``η`` (Alg. 2) unless FedAdam's ``bias_correction`` says otherwise. The moments live in the server stash under one
key per optimiser, so checkpoints carry them and a resumed run continues bit for bit; an entry nobody uploaded in
an aggregation keeps its moments unchanged.
"""
from __future__ import annotations

from collections.abc import Sequence
import math
from typing import Any, ClassVar

import attrs
import torch
from torch import nn

import fedcore
from fedcore import RoundContext, StashKey
from fedcore.settings import setting
from fedcore.types import AggregateResult, ClientUpdate, TensorDict
from fedcore_optim.change import STALENESS, WEIGHTING, averaged_change

Moments = dict[str, Any]
"""``{"step": int, "m": {entry: tensor}, "v": {entry: tensor}}``: what a server optimiser keeps between steps."""


def _state_dtype(dtype: torch.dtype) -> torch.dtype:
    """Moments are kept in float32, or float64 for float64 entries (steps are computed in float64)."""
    return torch.float64 if dtype == torch.float64 else torch.float32


class _AdaptiveChecks:
    @classmethod
    def __fedcore_checks__(cls) -> Any:  # how the contract checks build and run it (fedcore.testing.CheckPlan)
        from fedcore.testing import CheckPlan

        return CheckPlan(expected_failures={
            "check_aggregate_identity": "an adaptive step moves by η·m/(√v+τ), not by Δ: identical updates do not "
                                        "land the model on them"})


@attrs.frozen(eq=False, kw_only=True)
class ServerOptimizer:
    """Base of the server optimisers: Δ from the clients' changes, then :meth:`rule` per entry."""

    STATE: ClassVar[StashKey[Moments]]
    NAME: ClassVar[str]

    server_lr: float = setting(1.0, low=0.0, low_open=True, help="η: the server learning rate")
    weighting: str = setting("samples", choices=WEIGHTING,
                             help="clients' weights in Δ: by sample count (FedAvg, Flower) or 1/|S| (Reddi Alg. 2)")
    staleness: str = setting("polynomial", choices=STALENESS,
                             help="discount s(τ) of a stale change (asynchronous schedules; 1 when τ = 0)")
    a: float = setting(0.5, low=0.0, help="polynomial exponent / hinge slope of s(τ)")
    b: float = setting(4.0, low=0.0, help="hinge threshold of s(τ)")

    def rule(self, delta: torch.Tensor, m: torch.Tensor | None, v: torch.Tensor | None, step: int
             ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
        """``(move, m, v)`` for one entry (float64; ``m``/``v`` are ``None`` before the entry's first step)."""
        raise NotImplementedError

    @fedcore.hookimpl
    def fedcore_aggregate(self, model: nn.Module, updates: Sequence[ClientUpdate], ctx: RoundContext
                          ) -> AggregateResult:
        change = averaged_change(model, updates, weighting=self.weighting, staleness=self.staleness, a=self.a,
                                 b=self.b, component=self.NAME)
        old: Moments = ctx.server.stash.get(self.STATE) or {"step": 0, "m": {}, "v": {}}
        step = int(old["step"]) + 1
        current = model.state_dict()
        m_all, v_all = dict(old["m"]), dict(old["v"])
        out: TensorDict = dict(change.keep)
        sq_delta, sq_move = 0.0, 0.0
        for key, delta in change.delta.items():
            m_old, v_old = m_all.get(key), v_all.get(key)
            # moments read back from a checkpoint sit on the CPU; a resumed run may train on another device
            move, m, v = self.rule(delta, None if m_old is None else m_old.to(delta.device, torch.float64),
                                   None if v_old is None else v_old.to(delta.device, torch.float64), step)
            dtype = current[key].dtype
            out[key] = (current[key].to(torch.float64) + move).to(dtype)
            m_all[key] = m.to(_state_dtype(dtype))
            if v is not None:
                v_all[key] = v.to(_state_dtype(dtype))
            sq_delta += float((delta**2).sum())
            sq_move += float((move**2).sum())
        ctx.server.stash[self.STATE] = {"step": step, "m": m_all, "v": v_all}
        return AggregateResult(state=out, metrics={"server_step": float(step), "delta_norm": math.sqrt(sq_delta),
                                                   "move_norm": math.sqrt(sq_move),
                                                   "staleness_weight": change.mean_staleness_weight})


FEDAVGM_STATE = StashKey[Moments]("optim.fedavgm")
FEDADAM_STATE = StashKey[Moments]("optim.fedadam")
FEDYOGI_STATE = StashKey[Moments]("optim.fedyogi")
FEDADAGRAD_STATE = StashKey[Moments]("optim.fedadagrad")


@attrs.frozen(eq=False, kw_only=True)
class FedAvgM(ServerOptimizer):
    """FedAvg with server momentum (Hsu et al., 2019): ``m ← β m + Δ``, ``x ← x + η m``.

    ``momentum = 0`` and ``server_lr = 1`` is FedAvg. Flower's ``FedAvgM`` does the same with
    ``server_learning_rate`` = η and ``server_momentum`` = β (its pseudo-gradient is −Δ).
    """

    STATE: ClassVar[StashKey[Moments]] = FEDAVGM_STATE
    NAME: ClassVar[str] = "fedavgm"

    server_lr: float = setting(1.0, low=0.0, low_open=True, help="η: the server learning rate")
    momentum: float = setting(0.9, low=0.0, high=1.0, high_open=True, help="β: the server momentum")

    def rule(self, delta: torch.Tensor, m: torch.Tensor | None, v: torch.Tensor | None, step: int
             ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
        m = delta.clone() if m is None else self.momentum * m + delta
        return self.server_lr * m, m, None


@attrs.frozen(eq=False, kw_only=True)
class _Adaptive(_AdaptiveChecks, ServerOptimizer):
    """Shared by FedAdam, FedYogi and FedAdagrad: the first moment, τ, the start of v, the step."""

    beta_1: float = setting(0.9, low=0.0, high=1.0, high_open=True, help="β₁: first-moment decay")
    tau: float = setting(1e-3, low=0.0, low_open=True, help="τ: the adaptivity floor added to √v")
    initial_v: float | None = setting(None, kind=float, low=0.0, optional=True,
                                      help="v₋₁ (default τ², Reddi Alg. 2 needs ≥ τ²; Flower starts at 0)")

    def second_moment(self, v: torch.Tensor, delta: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def lr_at(self, step: int) -> float:
        return self.server_lr

    def rule(self, delta: torch.Tensor, m: torch.Tensor | None, v: torch.Tensor | None, step: int
             ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
        if m is None:
            m = torch.zeros_like(delta)
        if v is None:
            v = torch.full_like(delta, self.tau**2 if self.initial_v is None else self.initial_v)
        m = self.beta_1 * m + (1.0 - self.beta_1) * delta
        v = self.second_moment(v, delta)
        return self.lr_at(step) * m / (v.sqrt() + self.tau), m, v


BIAS_CORRECTIONS = ("none", "adam", "flower")


@attrs.frozen(eq=False, kw_only=True)
class FedAdam(_Adaptive):
    """FedAdam (Reddi et al., 2021, Alg. 2): Adam's moments on Δ, ``x ← x + η m / (√v + τ)``.

    ``bias_correction``: ``none`` (Alg. 2), ``adam`` (Kingma & Ba's ``η √(1−β₂ᵗ)/(1−β₁ᵗ)`` at step t) or
    ``flower`` (Flower's FedAdam, which uses ``t + 1`` where Kingma & Ba use ``t``).
    """

    STATE: ClassVar[StashKey[Moments]] = FEDADAM_STATE
    NAME: ClassVar[str] = "fedadam"

    server_lr: float = setting(0.1, low=0.0, low_open=True, help="η: the server learning rate (Flower: 0.1)")
    beta_2: float = setting(0.99, low=0.0, high=1.0, high_open=True, help="β₂: second-moment decay")
    tau: float = setting(1e-9, low=0.0, low_open=True, help="τ: the adaptivity floor added to √v (Flower: 1e-9)")
    bias_correction: str = setting("none", choices=BIAS_CORRECTIONS,
                                   help="none (Reddi Alg. 2), adam (Kingma & Ba, step t) or flower (step t + 1)")

    def second_moment(self, v: torch.Tensor, delta: torch.Tensor) -> torch.Tensor:
        return self.beta_2 * v + (1.0 - self.beta_2) * delta**2

    def lr_at(self, step: int) -> float:
        if self.bias_correction == "none":
            return self.server_lr
        t = step if self.bias_correction == "adam" else step + 1
        return self.server_lr * math.sqrt(1.0 - self.beta_2**t) / (1.0 - self.beta_1**t)


@attrs.frozen(eq=False, kw_only=True)
class FedYogi(_Adaptive):
    """FedYogi (Reddi et al., 2021, Alg. 2): ``v ← v − (1−β₂) Δ² sign(v − Δ²)``, ``x ← x + η m / (√v + τ)``."""

    STATE: ClassVar[StashKey[Moments]] = FEDYOGI_STATE
    NAME: ClassVar[str] = "fedyogi"

    server_lr: float = setting(0.01, low=0.0, low_open=True, help="η: the server learning rate (Flower: 0.01)")
    beta_2: float = setting(0.99, low=0.0, high=1.0, high_open=True, help="β₂: second-moment decay")

    def second_moment(self, v: torch.Tensor, delta: torch.Tensor) -> torch.Tensor:
        sq = delta**2
        return v - (1.0 - self.beta_2) * sq * torch.sign(v - sq)


@attrs.frozen(eq=False, kw_only=True)
class FedAdagrad(_Adaptive):
    """FedAdagrad (Reddi et al., 2021, Alg. 2): ``v ← v + Δ²``, ``x ← x + η m / (√v + τ)``.

    ``beta_1 = 0`` by default (no momentum: classic Adagrad, and Flower's FedAdagrad, which fixes it at 0);
    Alg. 2 writes the first moment for all three optimisers, so ``beta_1 > 0`` gives it.
    """

    STATE: ClassVar[StashKey[Moments]] = FEDADAGRAD_STATE
    NAME: ClassVar[str] = "fedadagrad"

    server_lr: float = setting(0.1, low=0.0, low_open=True, help="η: the server learning rate (Flower: 0.1)")
    beta_1: float = setting(0.0, low=0.0, high=1.0, high_open=True, help="β₁: first-moment decay (Flower: 0)")
    tau: float = setting(1e-9, low=0.0, low_open=True, help="τ: the adaptivity floor added to √v (Flower: 1e-9)")

    def second_moment(self, v: torch.Tensor, delta: torch.Tensor) -> torch.Tensor:
        return v + delta**2
