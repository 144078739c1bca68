"""SA-FedLoRA (Yang et al., arXiv:2405.09394): a proximal initiating stage, then LoRA with an annealed rank.

Round plan, as a pure function of the global round ``t`` (spec §2.1):

* ``t < t1_rounds`` -- initiating stage (Alg. 1): full-model FedAvg, ``e1_local_epochs`` local epochs
  with the FedProx term ``(mu/2)||W_g − W_s||²`` (Eq. 5). The full model crosses the network.
* ``t >= t1_rounds`` -- annealing stage (Alg. 2) with ``τ = t − t1_rounds``: at round start the server
  injects peft LoRA adapters at rank ``r_a`` once (seeded, broadcast), then sets the global factors to
  rank ``r_τ`` (Eqs. 11-14) by SVD truncation or slicing. Clients train only the factors (+ head),
  ``e2_local_epochs`` epochs, no proximal term; only those tensors cross the network.

Ablations are settings: M1 fixed-rank FedLoRA ``t1_rounds=0, r_a=r_b``; M2 annealing only
``t1_rounds=0``; M3 initiating only ``r_a=r_b``.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any
import warnings

import attrs
from torch import nn

import fedcore
from fedcore.builtin import weighted_mean
from fedcore.errors import ConfigError
from fedcore.rng import derive_seed
from fedcore.settings import setting
from fedcore.types import AggregateResult, ClientUpdate, Share
from fedcore_lora import (
    DEFAULT_TARGETS,
    check_rank,
    current_rank,
    factor_pairs,
    find_targets,
    has_lora,
    inject_lora,
    lora_share,
    matching_keys,
    product_mean,
    set_rank,
    subset_share,
)
from fedcore_safedlora.schedules import ROUNDING, SHAPES, RankSchedule
from fedcore_safedlora.training import Trainer

INITIATING, ANNEALING = 1, 2


@attrs.frozen(eq=False, kw_only=True)
class SAFedLoRA(Trainer):
    """Two-stage SA-FedLoRA: T1 rounds of proximal full-model FedAvg, then LoRA factors at an annealed rank r_t."""

    t1_rounds: int = setting(3, low=0, help="initiating-stage rounds T1 (0 = no initiating stage, M1/M2)")
    e1_local_epochs: int = setting(30, low=1, help="local epochs E1 in the initiating stage")
    mu: float = setting(0.01, low=0.0, help="proximal coefficient of the initiating stage (Eq. 5)")
    t2_rounds: int = setting(80, low=1, help="annealing-stage rounds T2 (the schedule's horizon)")
    e2_local_epochs: int = setting(2, low=1, help="local epochs E2 in the annealing stage")
    r_a: int = setting(12, low=1, help="heating (initial) LoRA rank")
    r_b: int = setting(8, low=1, help="cooling (final) LoRA rank")
    t_a: int | None = setting(None, kind=int, optional=True, low=0, help="end of heating; None = round(0.025*T2)")
    t_b: int | None = setting(None, kind=int, optional=True, low=0, help="start of cooling; None = round(0.15*T2)")
    scheduler: str = setting("cubic", choices=SHAPES, help="decay shape (Eqs. 12-14)")
    cosine_n: float = setting(1.0, low=0.0, low_open=True, help="n of the corrected cosine (Eq. 14)")
    rank_rounding: str = setting("floor", choices=ROUNDING)
    truncation: str = setting("svd", choices=("svd", "slice"), help="how the global factors lose rank (spec §2.4)")
    aggregation_mode: str = setting("factors", choices=("factors", "product_svd"),
                                    help="average A and B separately, or the products BA re-factorised by SVD")
    lora_target_modules: str = setting(DEFAULT_TARGETS, help="regex over nn.Linear module names")
    lora_init_std: float | None = setting(None, kind=float, optional=True, low=0.0, low_open=True,
                                          help="std of A at init; None = 1/r_a (peft 'gaussian')")
    train_head_in_lora_stage: bool = setting(True, help="train and send the head with the factors")
    head_pattern: str = setting(r"^head\.", help="regex of the head's state entries")
    count_transition_broadcast: bool = setting(True, help="send the stage-1 backbone once at the switch")

    def __attrs_post_init__(self) -> None:
        name = type(self).__name__
        if self.r_b > self.r_a:
            raise ConfigError(f"{name}.r_b={self.r_b} > {name}.r_a={self.r_a}: the cooling rank may not exceed "
                              f"the heating rank")
        t_a, t_b = self.phase_bounds
        if t_a > t_b:
            raise ConfigError(f"{name}.t_a={t_a} > {name}.t_b={t_b}: heating must end before cooling starts")
        if t_b >= self.t2_rounds:
            raise ConfigError(f"{name}.t_b={t_b} must be < t2_rounds={self.t2_rounds} (0 <= t_a <= t_b < T2)")
        if self.r_a > 1.5 * self.r_b:
            warnings.warn(f"{name}: r_a/r_b = {self.r_a / self.r_b:.2f} > 1.5, the paper's rule of thumb (§3.3)",
                          stacklevel=3)

    # -- presets ------------------------------------------------------------------------------

    @classmethod
    def ablation(cls, mode: str, **settings: Any) -> SAFedLoRA:
        """``M1`` fixed-rank FedLoRA, ``M2`` annealing only, ``M3`` initiating only, ``M4`` the full method."""
        mode = mode.upper()
        if mode not in ("M1", "M2", "M3", "M4"):
            raise ConfigError(f"ablation mode={mode!r}; choose one of: M1, M2, M3, M4")
        if mode in ("M1", "M2"):
            settings["t1_rounds"] = 0
        if mode in ("M1", "M3"):
            settings["r_a"] = settings.get("r_b", attrs.fields(cls).r_b.default)
        return cls(**settings)

    # -- the round plan -----------------------------------------------------------------------

    @property
    def phase_bounds(self) -> tuple[int, int]:
        """(t_a, t_b); unset ones default to round(0.025·T2) and round(0.15·T2) (spec §7 item 2), kept in order."""
        t_a = round(0.025 * self.t2_rounds) if self.t_a is None else self.t_a
        if self.t_b is not None:
            return t_a, self.t_b
        return t_a, max(t_a, min(self.t2_rounds - 1, round(0.15 * self.t2_rounds)))

    @property
    def rank_schedule(self) -> RankSchedule:
        t_a, t_b = self.phase_bounds
        return RankSchedule(r_a=self.r_a, r_b=self.r_b, t_a=t_a, t_b=t_b, shape=self.scheduler, n=self.cosine_n,
                            rounding=self.rank_rounding)

    def stage(self, t: int) -> int:
        return INITIATING if t < self.t1_rounds else ANNEALING

    def rank_at(self, t: int) -> int | None:
        """The LoRA rank of global round ``t`` (``None`` in the initiating stage)."""
        return None if t < self.t1_rounds else self.rank_schedule(t - self.t1_rounds)

    # -- hooks --------------------------------------------------------------------------------

    @fedcore.hookimpl
    def fedcore_run_start(self, run: Any) -> None:
        model = run.server.model
        if not has_lora(model):  # fail before any training, not at the stage switch
            targets = find_targets(model, self.lora_target_modules, setting=f"{type(self).__name__}.lora_target_modules")
            check_rank(model, targets, self.r_a, setting=f"{type(self).__name__}.r_a")
        if self.train_head_in_lora_stage and not matching_keys(model, self.head_pattern,
                                                                setting=f"{type(self).__name__}.head_pattern"):
            tops = ", ".join(dict.fromkeys(k.split(".")[0] for k in model.state_dict()))
            raise ConfigError(f"{type(self).__name__}.head_pattern={self.head_pattern!r} matches no entry of this "
                              f"{type(model).__name__} (its top-level entries: {tops}); set it to the classifier's "
                              f"name or train_head_in_lora_stage=false")

    @fedcore.hookimpl
    def fedcore_round_start(self, ctx: Any) -> None:
        rank = self.rank_at(ctx.round)
        if rank is None:
            return
        model = ctx.server.model
        if not has_lora(model):
            inject_lora(model, target=self.lora_target_modules, rank=self.r_a, init_std=self.lora_init_std,
                        seed=derive_seed(ctx.seed, "sa-fedlora", "lora-init"))
        if current_rank(model) != rank:
            set_rank(model, rank, mode=self.truncation, seed=derive_seed(ctx.seed, "sa-fedlora", "rank", ctx.round),
                     setting=f"{type(self).__name__}.r_t")

    @fedcore.hookimpl
    def fedcore_split_model(self, model: nn.Module, client: Any, ctx: Any) -> Share:
        t = ctx.round
        if self.stage(t) == INITIATING or not has_lora(model):
            if self.stage(t) == ANNEALING:
                raise ValueError(f"round {t} is in the annealing stage but the global model has no adapters; "
                                 f"{type(self).__name__} injects them in fedcore_round_start")
            params = [n for n, _ in model.named_parameters()]
            return subset_share(model, client.id, ctx, params, download=list(model.state_dict()),
                                meta={"stage": INITIATING})
        switch = self.count_transition_broadcast and self.t1_rounds > 0 and t == self.t1_rounds
        share = lora_share(model, client.id, ctx, extra=self.head_pattern if self.train_head_in_lora_stage else None,
                           download_all=switch)
        return attrs.evolve(share, meta=dict(share.meta, stage=ANNEALING, transition_broadcast=switch))

    @fedcore.hookimpl
    def fedcore_local_update(self, client: Any, share: Share, data: Any, ctx: Any) -> ClientUpdate:
        if share.meta.get("stage", INITIATING) == INITIATING:
            return self.train(client, share, data, ctx, epochs=self.e1_local_epochs, mu=self.mu)
        return self.train(client, share, data, ctx, epochs=self.e2_local_epochs, mu=0.0)

    @fedcore.hookimpl
    def fedcore_aggregate(self, model: nn.Module, updates: Sequence[ClientUpdate], ctx: Any) -> AggregateResult:
        weights = [float(u.num_examples) for u in updates]  # p_s = |D_s| / |D| (Eq. 3, Eq. 9)
        shapes = {k: tuple(v.shape) for k, v in updates[0].tensors.items()}
        for u in updates[1:]:
            bad = [k for k, v in u.tensors.items() if shapes.get(k) != tuple(v.shape)]
            if bad:
                raise ValueError(f"client {u.client_id} sent {bad[0]!r} with a shape unlike client "
                                 f"{updates[0].client_id}'s: all clients of a round must share one rank")
        state = weighted_mean(updates, weights)
        if self.aggregation_mode == "product_svd":
            for b_key, a_key in factor_pairs(list(state)).values():
                pairs = [(u.tensors[b_key], u.tensors[a_key]) for u in updates]
                state[b_key], state[a_key] = product_mean(pairs, weights, rank=pairs[0][1].shape[0])
        return AggregateResult(state=state)

    @fedcore.hookimpl
    def fedcore_collect_metrics(self, ctx: Any) -> dict[str, float]:
        model = ctx.server.model
        return {"stage": float(self.stage(ctx.round)), "lora_rank": float(current_rank(model)) if has_lora(model) else 0.0}


@attrs.frozen(eq=False, kw_only=True)
class FedLoRA(SAFedLoRA):
    """Fixed-rank FedLoRA (ablation M1): no initiating stage, one rank r_a = r_b throughout."""

    t1_rounds: int = setting(0, low=0, help="initiating-stage rounds (0 for plain FedLoRA)")
    r_a: int = setting(8, low=1, help="LoRA rank (= r_b for a fixed rank)")
    r_b: int = setting(8, low=1, help="LoRA rank")

    @classmethod
    def __fedcore_checks__(cls) -> Any:  # how the contract checks build and run it (fedcore.testing.CheckPlan)
        from fedcore.testing import CheckPlan, ContractFixture, tiny_vit
        from fedcore_lora import inject_lora

        def vit_with_lora() -> Any:
            model = tiny_vit()
            inject_lora(model, rank=2, seed=0)
            return model

        return CheckPlan(fixture=ContractFixture(model_factory=vit_with_lora))
