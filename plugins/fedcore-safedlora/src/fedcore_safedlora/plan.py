"""SA-FedLoRA's round plan (Yang et al., arXiv:2405.09394) as one observer: which stage, which rank.

As a pure function of the global round ``t`` (spec §2.1):

* ``t < t1_rounds`` -- initiating stage (Alg. 1): the whole model is shared (see :class:`StageShare`).
* ``t >= t1_rounds`` -- annealing stage (Alg. 2) with ``τ = t − t1_rounds``: at round start the plan
  injects peft LoRA adapters at rank ``r_a`` once (seeded), then sets the global factors to rank ``r_τ``
  (Eqs. 11-14) by SVD truncation or slicing.

The other components read the plan's decision from the global model itself (adapters present: stage 2;
their rank: r_t). Stale updates made for an older share (asynchronous schedules) are adapted here
(:meth:`fedcore_adapt_update`): factors truncated or padded to the current rank, stage-1 updates dropped.
Ablations are settings: M1 fixed-rank FedLoRA ``t1_rounds=0, r_a=r_b``; M2 annealing only
``t1_rounds=0``; M3 initiating only ``r_a=r_b``.

The adapters' target modules, alpha and dropout come from the model's ``[model.lora]`` (the plan's
``lora_target_modules`` is used only where the model gives none, and a different one is refused); the ranks are
the plan's, except ``r_a = 0``, which takes ``model.lora.r`` (8 when the model gives none): the ``fedlora`` recipe's
fixed rank.
"""
from __future__ import annotations

from typing import Any, ClassVar
import warnings

import attrs
import torch
from torch import nn

import fedcore
from fedcore.errors import ConfigError
from fedcore.rng import derive_seed
from fedcore.settings import setting
from fedcore.stash import StashKey
from fedcore.types import ClientUpdate, DropUpdate
from fedcore_lora import (
    DEFAULT_TARGETS,
    ResolvedLoRA,
    check_rank,
    current_rank,
    factor_pairs,
    has_lora,
    inject_lora,
    ranks,
    resolve_lora,
    set_rank,
    truncate_factors,
)
from fedcore_safedlora.schedules import ROUNDING, SHAPES, RankSchedule

INITIATING, ANNEALING = 1, 2
INJECTED_AT = StashKey[int]("safedlora.adapters_injected_at")
"""The round in which the plan injected the adapters (server stash): the share broadcasts the backbone then."""


def share_signature(model: nn.Module) -> str:
    """The signature of the share the global model implies: ``"stage1"``, or ``"lora-r<rank>"``."""
    found = set(ranks(model).values())  # one walk (it runs for every client)
    if len(found) > 1:
        current_rank(model)  # raises, naming the ranks
    return f"lora-r{found.pop()}" if found else "stage1"


@attrs.frozen(eq=False, kw_only=True)
class SAFedLoRAPlan:
    """SA-FedLoRA's stage and rank plan: inject adapters at r_a when stage 2 starts, anneal the rank to r_b."""

    applies_model_lora: ClassVar[bool] = True  # it injects the adapters a model's [model.lora] asks for

    t1_rounds: int = setting(3, low=0, help="initiating-stage rounds T1 (0 = no initiating stage, M1/M2)")
    t2_rounds: int = setting(80, low=1, help="annealing-stage rounds T2 (the schedule's horizon)")
    r_a: int = setting(12, low=0, help="heating (initial) LoRA rank, the adapters' rank at injection; 0 = the "
                                       "model's model.lora.r (8 if it gives none)")
    r_b: int = setting(8, low=0, help="cooling (final) LoRA rank; 0 = r_a (a fixed rank)")
    t_a: int | None = setting(None, kind=int, optional=True, low=0, help="end of heating; None = round(0.025*T2)")
    t_b: int | None = setting(None, kind=int, optional=True, low=0, help="start of cooling; None = round(0.15*T2)")
    scheduler: str = setting("cubic", choices=SHAPES, help="decay shape (Eqs. 12-14)")
    cosine_n: float = setting(1.0, low=0.0, low_open=True, help="n of the corrected cosine (Eq. 14)")
    rank_rounding: str = setting("floor", choices=ROUNDING)
    truncation: str = setting("svd", choices=("svd", "slice"),
                              help="how factors lose rank: the global ones (spec §2.4) and stale clients' ones")
    lora_target_modules: str = setting(DEFAULT_TARGETS, help="regex over nn.Linear module names; "
                                                             "model.lora.target_modules replaces the default")
    lora_init_std: float | None = setting(None, kind=float, optional=True, low=0.0, low_open=True,
                                          help="std of A at init; None = 1/r_a (peft 'gaussian')")

    def __attrs_post_init__(self) -> None:
        name = type(self).__name__
        if self.r_a and self.r_b:
            self._check_ranks(self.r_a, self.r_b)
        t_a, t_b = self.phase_bounds
        if t_a > t_b:
            raise ConfigError(f"{name}.t_a={t_a} > {name}.t_b={t_b}: heating must end before cooling starts")
        if t_b >= self.t2_rounds:
            raise ConfigError(f"{name}.t_b={t_b} must be < t2_rounds={self.t2_rounds} (0 <= t_a <= t_b < T2)")
        if self.r_a and self.r_b and self.r_a > 1.5 * self.r_b:
            warnings.warn(f"{name}: r_a/r_b = {self.r_a / self.r_b:.2f} > 1.5, the paper's rule of thumb (§3.3)",
                          stacklevel=3)

    def _check_ranks(self, r_a: int, r_b: int) -> None:
        name = type(self).__name__
        if r_b > r_a:
            raise ConfigError(f"{name}.r_b={r_b} > {name}.r_a={r_a}: the cooling rank may not exceed the heating rank")

    @classmethod
    def ablation(cls, mode: str, **settings: Any) -> SAFedLoRAPlan:
        """``M1`` fixed-rank FedLoRA, ``M2`` annealing only, ``M3`` initiating only, ``M4`` the full method."""
        mode = mode.upper()
        if mode not in ("M1", "M2", "M3", "M4"):
            raise ConfigError(f"ablation mode={mode!r}; choose one of: M1, M2, M3, M4")
        if mode in ("M1", "M2"):
            settings["t1_rounds"] = 0
        if mode in ("M1", "M3"):
            settings["r_a"] = settings.get("r_b", attrs.fields(cls).r_b.default)
        return cls(**settings)

    @property
    def phase_bounds(self) -> tuple[int, int]:
        """(t_a, t_b); unset ones default to round(0.025·T2) and round(0.15·T2) (spec §7 item 2), kept in order."""
        t_a = round(0.025 * self.t2_rounds) if self.t_a is None else self.t_a
        if self.t_b is not None:
            return t_a, self.t_b
        return t_a, max(t_a, min(self.t2_rounds - 1, round(0.15 * self.t2_rounds)))

    @property
    def rank_schedule(self) -> RankSchedule:
        """The schedule of the plan's own ranks (``r_a = 0``: see :meth:`schedule_for`, which reads the model's)."""
        if not self.r_a:
            raise ValueError("r_a = 0 takes the rank from the model's model.lora: use schedule_for(model)")
        return self._schedule(self.r_a, self.r_b or self.r_a)

    def _schedule(self, r_a: int, r_b: int) -> RankSchedule:
        t_a, t_b = self.phase_bounds
        return RankSchedule(r_a=r_a, r_b=r_b, t_a=t_a, t_b=t_b, shape=self.scheduler, n=self.cosine_n,
                            rounding=self.rank_rounding)

    def lora_for(self, model: nn.Module) -> ResolvedLoRA:
        """The adapters to inject into ``model``: its ``[model.lora]`` (targets, alpha, dropout) with the plan's
        heating rank; a rank or target pattern set differently in both places is one ConfigError line."""
        name = type(self).__name__
        return resolve_lora(model, rank=self.r_a or None, rank_setting=f"{name}.r_a",
                            target=self.lora_target_modules, target_setting=f"{name}.lora_target_modules",
                            hint="SA-FedLoRA injects its adapters at r_a and anneals them to r_b: set the ranks on "
                                 "sa-fedlora-plan, or r_a = 0 to take model.lora.r")

    def schedule_for(self, model: nn.Module) -> RankSchedule:
        """The rank schedule for ``model``: ``r_a = 0`` reads ``model.lora.r``, ``r_b = 0`` repeats r_a."""
        if self.r_a:
            return self.rank_schedule
        r_a = self.lora_for(model).rank
        r_b = self.r_b or r_a
        self._check_ranks(r_a, r_b)
        return self._schedule(r_a, r_b)

    def stage(self, t: int) -> int:
        return INITIATING if t < self.t1_rounds else ANNEALING

    def rank_at(self, t: int, model: nn.Module | None = None) -> int | None:
        """The LoRA rank of global round ``t`` (``None`` in the initiating stage); ``model`` gives the rank when
        ``r_a = 0`` (its ``model.lora.r``)."""
        if t < self.t1_rounds:
            return None
        schedule = self.schedule_for(model) if model is not None else self.rank_schedule
        return schedule(t - self.t1_rounds)

    # -- hooks --------------------------------------------------------------------------------

    @classmethod
    def __fedcore_checks__(cls) -> Any:  # how the contract checks build and run it (fedcore.testing.CheckPlan)
        from fedcore.testing import CheckPlan, ContractFixture, tiny_vit

        return CheckPlan(fixture=ContractFixture(model_factory=tiny_vit))  # LoRA targets and a head: a ViT

    @fedcore.hookimpl
    def fedcore_run_start(self, run: fedcore.RunContext) -> None:
        model = run.server.model
        if not has_lora(model):  # fail before any training, not at the stage switch
            lora = self.lora_for(model)
            schedule = self.schedule_for(model)
            check_rank(model, list(lora.targets), schedule.r_a, setting=f"{type(self).__name__}.r_a")

    @fedcore.hookimpl
    def fedcore_round_start(self, ctx: fedcore.RoundContext) -> None:
        server = ctx.server
        rank = self.rank_at(ctx.round, server.model)
        if rank is None:
            return
        if not has_lora(server.model):
            lora = self.lora_for(server.model)
            inject_lora(server.model, target=lora.targets, rank=self.schedule_for(server.model).r_a,
                        init_std=self.lora_init_std, alpha=lora.alpha, dropout=lora.dropout,
                        seed=derive_seed(ctx.seed, "sa-fedlora", "lora-init"))
            server.stash[INJECTED_AT] = ctx.round
        if current_rank(server.model) != rank:
            set_rank(server.model, rank, mode=self.truncation,
                     seed=derive_seed(ctx.seed, "sa-fedlora", "rank", ctx.round), setting=f"{type(self).__name__}.r_t")

    @fedcore.hookimpl
    def fedcore_adapt_update(self, update: ClientUpdate, model: nn.Module, ctx: fedcore.RoundContext
                             ) -> ClientUpdate | DropUpdate | None:
        made_for, now = update.share_signature, share_signature(model)
        if made_for is None or made_for == now:
            return None
        if made_for == "stage1":
            return DropUpdate(reason=f"made for stage 1, the model is in stage 2 (rank {current_rank(model)})")
        if now == "stage1":
            return DropUpdate(reason=f"made for the LoRA share {made_for}, the model has no adapters")
        rank = current_rank(model)
        return attrs.evolve(update, tensors=self.resize(update.tensors, model, rank),
                            base=self.resize(update.base, model, rank))

    def resize(self, tensors: dict[str, torch.Tensor], model: nn.Module, rank: int) -> dict[str, torch.Tensor]:
        """Factors of a stale update at ``rank``: truncated (``truncation``), or padded with zero columns of B
        and the global model's rows of A (the product B A is unchanged and no direction is pulled to zero)."""
        out = dict(tensors)
        own = model.state_dict()
        for b_key, a_key in factor_pairs(list(tensors)).values():
            b, a = tensors[b_key], tensors[a_key]
            if a.shape[0] > rank:
                out[b_key], out[a_key] = truncate_factors(b, a, rank, self.truncation)
            elif a.shape[0] < rank:
                out[b_key] = torch.cat([b, b.new_zeros(b.shape[0], rank - a.shape[0])], 1)
                out[a_key] = torch.cat([a, own[a_key][a.shape[0]:rank].to(a.dtype)], 0)
        return out

    @fedcore.hookimpl
    def fedcore_collect_metrics(self, ctx: fedcore.RoundContext) -> dict[str, float]:
        model = ctx.server.model
        rank = float(current_rank(model)) if has_lora(model) else 0.0
        return {"stage": float(self.stage(ctx.round)), "lora_rank": rank}
