"""User-level DP-FedAvg (McMahan et al., ICLR 2018) with fixed or adaptive clipping (Andrew et al., NeurIPS 2021).

One component wraps three slots and keeps the privacy ledger:

* ``split`` (server): refuses uploads it cannot bound (features, logits) and tells each client the round's clip
  norm ``C`` (and, for distributed noise, its share of the noise) in ``Share.meta``;
* ``cohort`` (client): after local training, each client clips its change to ``C`` (and adds its noise share);
  a wrapper of the cohort slot, so it sees every client of ``per-job``, ``vectorised`` or any other cohort;
* ``aggregate`` (server): sums the clipped changes, adds the Gaussian noise (central), releases the noised mean
  change as the one update the wrapped aggregator sees, updates ``C`` from the noised clipped fraction
  (adaptive) and records the aggregation as a sampled Gaussian mechanism for the accountant.

ε at δ after every aggregation is the history's ``dp_epsilon`` column, computed by ``dp-accounting`` or Opacus
(:mod:`fedcore_dp.accounting`) from the realised participation rate and noise of every aggregation the run made,
so asynchronous schedules are charged for the aggregations they really made. ``target_epsilon`` ends the run
before an aggregation that would spend more (``RunContext.request_stop``).
"""
from __future__ import annotations

from collections.abc import Sequence
import math
from typing import Any

import attrs
import torch
from torch import nn

import fedcore
from fedcore import ClientUpdate, ConfigError, RoundContext, Share, StashKey
from fedcore.settings import setting
from fedcore.types import require_mean_aggregator
from fedcore_dp import accounting
from fedcore_dp.clipping import (
    adaptive_noise_multiplier,
    add,
    clip,
    gaussian_like,
    next_clip,
)
from fedcore_dp.compat import SUM_CLIENTS, SUM_MEMBERS, refuse_unbounded_upload

CLIP = StashKey[float]("dp.clip-norm")
"""The clip norm for the next round (adaptive clipping moves it; fixed clipping never writes it)."""
EVENTS = StashKey[list]("dp.events")
"""Every aggregation's mechanism as ``[q, z, count]`` lists (plain values: the checkpoint keeps them)."""
STOPPED = StashKey[str]("dp.stopped")
"""Why the budget ended the run; a resumed run reads it and stops again before its next round."""

META_CLIP = "dp.clip"
META_NOISE_STD = "dp.noise_std"
META_UNCLIPPED = "dp.unclipped"
VARIANCE = "running_var"


@attrs.frozen(eq=False, kw_only=True)
class DPFedAvg:
    """DP-FedAvg: per-client clipping of the change, Gaussian noise on the sum, a privacy accountant.

    Wraps any aggregator of the mean change (it receives one update: the noised mean of the clipped changes,
    every client weighted equally). Put it in ``plugins``; list ``secagg`` before it when both are used.
    """

    noise_multiplier: float = setting(1.0, low=0.0, help="z: noise std / sensitivity of the sum (0: clipping only)")
    clip: float = setting(1.0, low=0.0, low_open=True, help="C: L2 bound of one client's change (adaptive: start)")
    clipping: str = setting("fixed", choices=("fixed", "adaptive"), help="fixed C, or C tracking a quantile of "
                                                                          "the norms (Andrew et al. 2021)")
    target_quantile: float = setting(0.5, low=0.0, high=1.0, help="γ: the share of clients left unclipped (adaptive)")
    clip_lr: float = setting(0.2, low=0.0, low_open=True, help="η_C: geometric step of the clip norm (adaptive)")
    bit_noise: float | None = setting(None, kind=float, low=0.0, low_open=True, optional=True,
                                      help="σ_b: noise on the unclipped count (adaptive; default max(clients/20, z))")
    noise: str = setting("central", choices=("central", "distributed"),
                         help="the server adds the noise, or each client adds its share (for secure aggregation)")
    clients_per_round: int | None = setting(None, kind=int, low=1, optional=True,
                                            help="m: clients whose noise shares make up the noise (distributed)")
    delta: float = setting(1e-5, low=0.0, high=1.0, low_open=True, high_open=True, help="δ of the reported ε")
    accountant: str = setting("rdp", choices=accounting.ACCOUNTANTS,
                              help="dp-accounting's rdp or pld, or Opacus's opacus-rdp or opacus-prv")
    target_epsilon: float | None = setting(None, kind=float, low=0.0, low_open=True, optional=True,
                                           help="end the run before an aggregation would spend more than this ε")
    amplification: bool = setting(True, help="account with amplification by sampling at the realised "
                                             "participation rate (False: every client counted in every round)")

    @classmethod
    def __fedcore_checks__(cls) -> Any:
        from fedcore.testing import CheckPlan

        return CheckPlan(presets=[cls(), cls(clipping="adaptive", noise_multiplier=0.5),
                                  cls(noise="distributed", clients_per_round=3)])

    # -- settings that depend on each other --------------------------------------------------

    def clip_now(self, stash: Any) -> float:
        """The clip norm of this round: the adaptive one in the server's stash, else the setting."""
        value = stash.get(CLIP)
        return self.clip if value is None else float(value)

    def bit_noise_for(self, clients: int) -> float:
        """σ_b: the setting, else Andrew et al.'s clients/20, at least ``z`` (so that ``z_Δ`` stays below 1.16·z)."""
        return self.bit_noise if self.bit_noise is not None else max(clients / 20.0, self.noise_multiplier, 0.05)

    def update_noise_multiplier(self, clients: int) -> float:
        """The noise multiplier of the change: ``z`` (fixed clipping), Andrew et al.'s ``z_Δ`` (adaptive)."""
        if self.clipping == "fixed" or self.noise_multiplier == 0:
            return self.noise_multiplier
        return adaptive_noise_multiplier(self.noise_multiplier, self.bit_noise_for(clients))

    @fedcore.hookimpl
    def fedcore_check_pipeline(self, pipeline: fedcore.Pipeline) -> None:
        require_mean_aggregator(pipeline, "dp-fedavg hands the aggregator one update (the mean of the clients')")
        if self.noise == "distributed" and self.clients_per_round is None:
            raise ConfigError("DPFedAvg.noise='distributed' needs clients_per_round (m: each client adds 1/m of "
                              "the noise variance); set it to the clients of one aggregation")
        if self.clipping == "adaptive" and self.noise_multiplier > 0 and self.bit_noise is not None \
                and 2 * self.bit_noise <= self.noise_multiplier:
            raise ConfigError(f"DPFedAvg.bit_noise={self.bit_noise} must exceed noise_multiplier/2="
                              f"{self.noise_multiplier / 2} (Andrew et al. 2021, Thm. 1)")
        components = list(pipeline.components)
        mine = components.index(self)
        for i, other in enumerate(components):
            if getattr(type(other), "secure_sum", False):
                if i > mine:
                    raise ConfigError(f"list {type(other).__name__} before dp-fedavg in plugins: the clients clip "
                                      "(and add noise) before they mask, and the server unmasks before it releases")
                if getattr(other, "weighting", "uniform") != "uniform":
                    raise ConfigError(f"dp-fedavg weighs clients equally; set {type(other).__name__}.weighting="
                                      f"'uniform' (it is {other.weighting!r})")

    # -- server: the share tells the client the round's clip norm ---------------------------

    @fedcore.hookimpl(wrapper=True)
    def fedcore_split_model(self, model: nn.Module, client: Any, state: Any, ctx: RoundContext) -> Any:
        share: Share = yield
        refuse_unbounded_upload("dp-fedavg", share)
        bound = self.clip_now(ctx.server.stash)
        meta: dict[str, float] = {META_CLIP: bound}
        if self.noise == "distributed":
            m = int(self.clients_per_round or 1)
            meta[META_NOISE_STD] = self.update_noise_multiplier(m) * bound / math.sqrt(m)
        return attrs.evolve(share, meta={**share.meta, **meta})

    # -- clients: clip (and noise) each change after local training -------------------------

    @fedcore.hookimpl(wrapper=True)
    def fedcore_train_cohort(self, jobs: Sequence[Any], ctx: Any) -> Any:
        starts = [start_values(job.share) for job in jobs]
        outcomes = yield
        return [self.privatise(job, start, out) if isinstance(out, ClientUpdate) else out
                for job, start, out in zip(jobs, starts, outcomes)]

    def privatise(self, job: Any, start: dict[str, torch.Tensor], update: ClientUpdate) -> ClientUpdate:
        """The client's side of Alg. 1: ``Δ ← clip(Δ, C)`` (+ its noise share); adaptive: the unclipped bit."""
        bound = float(job.share.meta[META_CLIP])
        delta = {k: update.tensors[k].double() - v.double() for k, v in start.items() if k in update.tensors}
        clipped, norm, _ = clip(delta, bound)
        if self.noise == "distributed":
            std = float(job.share.meta[META_NOISE_STD])
            clipped = add(clipped, gaussian_like(clipped, std, job.ctx.rng("dp-noise")))
        tensors = dict(update.tensors)
        for k, d in clipped.items():
            tensors[k] = (start[k].double() + d).to(update.tensors[k].dtype)
        meta = dict(update.meta)
        if self.clipping == "adaptive":  # C comes down with the share, the bit goes up: both cross the network
            job.ctx.channel.down("dp-clip-norm", torch.tensor(bound, dtype=torch.float64))
            job.ctx.channel.up("dp-clip-bit", torch.tensor(int(norm <= bound), dtype=torch.uint8))
            meta[META_UNCLIPPED] = float(norm <= bound)
        return attrs.evolve(update, tensors=tensors, meta=meta)

    # -- server: noise the sum, release the mean, account ----------------------------------

    @fedcore.hookimpl(wrapper=True)
    def fedcore_aggregate(self, model: nn.Module, updates: list[ClientUpdate], ctx: RoundContext) -> Any:
        if not isinstance(updates, list):
            raise TypeError("dp-fedavg replaces the updates its aggregator sees; pass them as a list")
        original = list(updates)
        released, metrics = self.release(model, original, ctx)
        updates[:] = [released]
        try:
            result = yield
        finally:
            updates[:] = original
        return attrs.evolve(result, metrics={**result.metrics, **metrics})

    def release(self, model: nn.Module, updates: Sequence[ClientUpdate], ctx: RoundContext
                ) -> tuple[ClientUpdate, dict[str, float]]:
        """The noised mean change as one update on the current model, and the round's ``agg_dp_*`` metrics."""
        current = model.state_dict()
        stash = ctx.server.stash
        bound_now = self.clip_now(stash)
        total, members = summed_changes(updates, central=self.noise == "central", default_clip=bound_now)
        n = len(members)
        if n == 0:  # a secure aggregation that aborted: nothing is released, nothing is spent
            return updates[0], {"dp_clip": bound_now, "dp_clients": 0.0}
        per_client: dict[int, float] = {}
        for m in members:  # a client that answered twice in one aggregation (asynchronous restarts) counts twice
            per_client[m["client"]] = per_client.get(m["client"], 0.0) + float(m.get(META_CLIP, bound_now))
        sensitivity = max(per_client.values())
        metrics = {"dp_clip": bound_now, "dp_clients": float(n)}
        z_update = self.update_noise_multiplier(self.clients_per_round or n)
        sigma_b = self.bit_noise_for(self.clients_per_round or n)
        if self.clipping == "adaptive":  # centred bits b - 1/2: the count's sensitivity is 1/2 (Andrew et al. §3)
            centred = sum(float(m.get(META_UNCLIPPED, 1.0)) - 0.5 for m in members)
            if self.noise_multiplier > 0:
                centred += float(torch.randn((), generator=ctx.rng("dp-bit-noise"), dtype=torch.float64)) * sigma_b
            fraction = centred / n + 0.5
            stash[CLIP] = next_clip(bound_now, fraction, target_quantile=self.target_quantile, lr=self.clip_lr)
            metrics.update(dp_unclipped=fraction, dp_next_clip=float(stash[CLIP]))
        if self.noise == "central":
            std = z_update * sensitivity
            total = add(total, gaussian_like(total, std, ctx.rng("dp-noise")))
        else:  # the clients' shares: the noise that reached this sum
            std = math.sqrt(sum(float(m.get(META_NOISE_STD, 0.0)) ** 2 for m in members))
        z_real = std / sensitivity
        if self.clipping == "adaptive" and z_real > 0:  # the change and the count, released together (Thm. 1)
            z_real = (z_real ** -2 + (2.0 * sigma_b) ** -2) ** -0.5
        metrics["dp_noise_multiplier"] = z_real
        if z_real > 0:
            q = min(1.0, len(per_client) / len(ctx.run.clients)) if self.amplification and ctx.run else 1.0
            events = stash.setdefault(EVENTS, [])
            events.append([q, z_real, 1])
            stash[EVENTS] = [[e.q, e.z, e.count] for e in accounting.compress(accounting.Event(
                q=float(q_), z=float(z_), count=int(c_)) for q_, z_, c_ in events)]
        state: dict[str, torch.Tensor] = {}
        for k, d in total.items():
            value = current[k].double() + d / n
            if k.rsplit(".", 1)[-1] == VARIANCE:
                value = value.clamp_min(0.0)  # a noised variance below 0 is impossible; clamping is post-processing
            state[k] = value.to(current[k].dtype)
        heaviest = max(updates, key=lambda u: u.num_examples)
        for k, v in heaviest.tensors.items():  # counters are not privatised numbers to average: keep one
            if k not in state:
                state[k] = v.clone()
        released = ClientUpdate(client_id=-1, tensors=state, base={k: current[k].clone() for k in state},
                                num_examples=sum(u.num_examples for u in updates), version=ctx.server.version,
                                meta={"dp.clients": n})
        return released, metrics

    # -- the budget ------------------------------------------------------------------------

    def spent(self, stash: Any, extra: int = 0) -> float:
        events = [accounting.Event(q=q, z=z, count=int(c)) for q, z, c in stash.get(EVENTS, [])]
        if extra and events:
            last = events[-1]
            events.append(accounting.Event(q=last.q, z=last.z, count=extra))
        return accounting.epsilon(events, self.delta, self.accountant)

    @fedcore.hookimpl
    def fedcore_collect_metrics(self, ctx: RoundContext) -> dict[str, float] | None:
        if not ctx.server.stash.get(EVENTS):
            return None
        return {"dp_epsilon": self.spent(ctx.server.stash), "dp_delta": self.delta}

    @fedcore.hookimpl
    def fedcore_round_end(self, ctx: RoundContext, record: dict[str, Any]) -> None:
        stash = ctx.server.stash
        if self.target_epsilon is None or not stash.get(EVENTS) or ctx.run is None:
            return
        eps = float(record.get("dp_epsilon", self.spent(stash)))
        done = sum(int(c) for _, _, c in stash[EVENTS])
        if eps > self.target_epsilon:
            reason = (f"privacy budget spent: epsilon={eps:.4g} at delta={self.delta:g} after {done} aggregations "
                      f"exceeds target_epsilon={self.target_epsilon:g} (the first aggregations alone spend more)")
        else:
            following = self.spent(stash, extra=1)
            if following <= self.target_epsilon:
                return
            reason = (f"privacy budget spent: epsilon={eps:.4g} at delta={self.delta:g} after {done} aggregations; "
                      f"one more would reach {following:.4g} > target_epsilon={self.target_epsilon:g}")
        stash[STOPPED] = reason
        ctx.run.request_stop(reason)

    @fedcore.hookimpl
    def fedcore_round_start(self, ctx: RoundContext) -> None:
        reason = ctx.server.stash.get(STOPPED)
        if reason is not None and ctx.run is not None:  # a resumed run whose budget was spent stays stopped
            ctx.run.request_stop(reason)


def start_values(share: Share) -> dict[str, torch.Tensor]:
    """The values the client starts from: every floating entry it will upload, as downloaded."""
    state = share.module.state_dict()
    return {k: state[k].detach().clone() for k in share.upload if k in state and state[k].is_floating_point()}


def summed_changes(updates: Sequence[ClientUpdate], *, central: bool, default_clip: float
                   ) -> tuple[dict[str, torch.Tensor], list[dict[str, Any]]]:
    """The sum of the clients' clipped changes (float64) and each summed client's plain metadata.

    Individual updates are clipped again on the server under central noise (a trusted server enforces the bound
    itself; for honest clients it changes nothing). A secure sum (one update marked ``secure_sum.clients``) is
    already the mean of ``n`` clients: its change times ``n``.
    """
    total: dict[str, torch.Tensor] = {}
    members: list[dict[str, Any]] = []
    for u in updates:
        change = {k: u.tensors[k].double() - u.base[k].double() for k in u.tensors
                  if u.tensors[k].is_floating_point() and k in u.base}
        if SUM_CLIENTS in u.meta:
            n = int(u.meta[SUM_CLIENTS])
            change = {k: v * n for k, v in change.items()}
            members.extend(dict(m) for m in u.meta.get(SUM_MEMBERS, [{"client": -1}] * n))
        else:
            if central:
                change, _, _ = clip(change, float(u.meta.get(META_CLIP, default_clip)))
            members.append({"client": u.client_id, **{k: v for k, v in u.meta.items() if str(k).startswith("dp.")}})
        total = add(change, total) if total else change
    return total, members


__all__ = ["CLIP", "EVENTS", "STOPPED", "DPFedAvg", "start_values", "summed_changes"]
