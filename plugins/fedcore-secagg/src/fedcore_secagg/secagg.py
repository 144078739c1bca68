"""The ``secagg`` component: SecAgg+ around any aggregator of the mean change, on the ledger and the clock.

* ``split`` (server): refuses uploads that are not floating weights, and tells the clients the public weight
  scale (the mean client size). The upload *is* the protocol's masked input: ``field_bits/8`` bytes per entry,
  booked by the engine as the client's ``weights`` upload.
* ``cohort`` (client): after local training each client encodes its change (times its weight) into Z_R by
  stochastic quantisation and adds its self-mask ``PRG(b)``: its plain change never leaves it.
* ``aggregate`` (server): runs the rest of SecAgg+ among the clients of this aggregation (key advertisement,
  encrypted Shamir shares, pairwise masks, unmasking; :mod:`fedcore_secagg.protocol`), books every message on the
  ledger under its kind, prices the stages on the virtual clock (``AggregateResult.virtual_seconds``), and hands the
  wrapped aggregator one update: the unmasked mean change of the clients that finished.

The key exchange runs when the server aggregates, among the updates it holds: under asynchronous schedules that is
the only moment the cohort is known (Bell et al. run it before the inputs; the bytes and the time are the same,
in another order). Clients may drop at any stage (``dropout``); the exact sum of those that sent their input is
recovered, or the round is aborted when some secret has fewer than ``t`` shares (the global model is kept).
"""
from __future__ import annotations

from collections.abc import Sequence
import logging
import math
from typing import Any, ClassVar

import attrs
import numpy as np
import torch
from torch import nn

import fedcore
from fedcore import AggregateResult, ClientInfo, ClientUpdate, ConfigError, RoundContext, Share, Transfer
from fedcore.settings import setting
from fedcore.types import require_mean_aggregator
from fedcore_secagg import field
from fedcore_secagg.compat import SUM_CLIENTS, SUM_MEMBERS, refuse_unmaskable_upload
from fedcore_secagg.graph import default_degree
from fedcore_secagg.protocol import STAGES, Message, SecAggClient, cached_agreement, run_protocol, self_mask

log = logging.getLogger("fedcore.secagg")

KINDS = {"advertise": "secagg-keys", "share": "secagg-shares", "unmask": "secagg-unmask"}
"""The ledger kind of each stage's messages (the masked input is the clients' upload: kind ``weights``)."""
META_NONCE = "secagg.nonce"
META_WEIGHT = "secagg.weight"
META_SCALE = "secagg.weight_scale"


@attrs.frozen(eq=False, kw_only=True)
class SecAggPlus:
    """SecAgg+ (Bell et al., CCS 2020): the server learns only the sum of the clients' quantised changes.

    Wraps any aggregator of the mean change (it receives one update: the unmasked mean). Put it in ``plugins``
    (before ``dp-fedavg`` when both are used).
    """

    secure_sum: ClassVar[bool] = True  # the aggregator behind it sees one summed update (fedcore-dp reads this)

    field_bits: int = setting(32, choices=(16, 32), help="the ring Z_R, R = 2^field_bits: bits per uploaded entry")
    quant_bits: int = setting(22, low=1, high=31, help="quantisation levels 2^quant_bits per value")
    clip_range: float = setting(8.0, low=0.0, low_open=True, help="c: each (weighted) change is clipped to [-c, c]")
    degree: int | None = setting(None, kind=int, low=1, optional=True,
                                 help="k: neighbours per client (default min(n-1, 2·ceil(log2 n)))")
    threshold: float = setting(0.34, low=0.0, high=1.0, low_open=True,
                               help="t as a fraction of k: shares needed to rebuild a secret (t = ceil(fraction·k))")
    dropout: float = setting(0.0, low=0.0, high=1.0, high_open=True,
                             help="probability a client drops during the protocol, at a stage drawn uniformly")
    weighting: str = setting("samples", choices=("samples", "uniform"),
                             help="each change weighted by its sample count (relative to the mean client), or equally")

    @classmethod
    def __fedcore_checks__(cls) -> Any:
        from fedcore.testing import CheckPlan

        return CheckPlan(presets=[cls(), cls(field_bits=16, quant_bits=10, dropout=0.3, weighting="uniform")])

    def ring(self) -> int:
        return 2 ** self.field_bits

    def threshold_for(self, k: int) -> int:
        return max(1, math.ceil(self.threshold * k))

    @fedcore.hookimpl
    def fedcore_check_pipeline(self, pipeline: fedcore.Pipeline) -> None:
        require_mean_aggregator(pipeline, "secagg gives the server only the sum of the clients' updates")
        from fedcore.builtin import AsyncSchedule, BufferedSchedule

        schedule = pipeline.provider("schedule")
        alone = isinstance(schedule, AsyncSchedule) or (isinstance(schedule, BufferedSchedule)
                                                        and schedule.buffer_size < 2)
        if alone:
            raise ConfigError(f"secagg needs at least 2 clients per aggregation (the sum of one client is its "
                              f"update), but {type(schedule).__name__} aggregates each arrival alone; use "
                              f"schedule = \"buffered\" with buffer_size >= 2, \"semi-async\" or \"uniform\"")
        if self.quant_bits >= self.field_bits:
            raise ConfigError(f"SecAggPlus.quant_bits={self.quant_bits} leaves no room to sum in a "
                              f"{self.field_bits}-bit field; use quant_bits < field_bits")

    # -- server: the share's upload is the masked input ------------------------------------

    @fedcore.hookimpl(wrapper=True)
    def fedcore_split_model(self, model: nn.Module, client: Any, state: Any, ctx: RoundContext) -> Any:
        share: Share = yield
        refuse_unmaskable_upload("secagg", share)
        clients = ctx.run.clients if ctx.run is not None else ()
        scale = sum(c.num_samples for c in clients) / len(clients) if clients else 1.0  # public: the mean client
        return attrs.evolve(share, meta={**share.meta, META_SCALE: float(scale)})

    # -- clients: quantise, then self-mask, before anything leaves -------------------------

    @fedcore.hookimpl(wrapper=True)
    def fedcore_train_cohort(self, jobs: Sequence[Any], ctx: Any) -> Any:
        starts = [{k: v.detach().clone() for k, v in job.share.module.state_dict().items() if k in job.share.upload}
                  for job in jobs]
        outcomes = yield
        return [self.encode(job, start, out) if isinstance(out, ClientUpdate) else out
                for job, start, out in zip(jobs, starts, outcomes)]

    def encode(self, job: Any, start: dict[str, torch.Tensor], update: ClientUpdate) -> ClientUpdate:
        names = sorted(update.tensors)
        change = field.flatten(update.tensors, names) - field.flatten(start, names)
        weight = update.num_examples / float(job.share.meta[META_SCALE]) if self.weighting == "samples" else 1.0
        quantised = field.quantise(change * weight, self.clip_range, self.quant_bits,
                                   np.random.default_rng(job.ctx.seed_for("secagg-quantise")))
        nonce = job.ctx.seed_for("secagg-nonce")  # the client's private randomness for this job
        masked = (quantised + self_mask(nonce, quantised.size, self.ring())) % self.ring()
        shapes = {k: update.tensors[k].shape for k in names}
        return attrs.evolve(update, tensors=field.to_tensors(masked, shapes, names, self.field_bits),
                            meta={**update.meta, META_NONCE: nonce, META_WEIGHT: weight})

    # -- server: the protocol, the unmasked mean -------------------------------------------

    @fedcore.hookimpl(wrapper=True)
    def fedcore_aggregate(self, model: nn.Module, updates: list[ClientUpdate], ctx: RoundContext) -> Any:
        if not isinstance(updates, list):
            raise TypeError("secagg replaces the updates its aggregator sees; pass them as a list")
        original = list(updates)
        released, metrics, seconds = self.unmask(model, original, ctx)
        current = model.state_dict()
        updates[:] = [released if released is not None else ClientUpdate(
            client_id=-1, tensors={k: current[k].clone() for k in original[0].tensors},
            base={k: current[k].clone() for k in original[0].tensors}, num_examples=1, version=ctx.server.version,
            meta={SUM_CLIENTS: 0, SUM_MEMBERS: []})]  # aborted: a no-change stand-in, its result is discarded
        try:
            result = yield
        finally:
            updates[:] = original
        if released is None:  # aborted: the global model stays as it is
            return AggregateResult(state={}, metrics=metrics, virtual_seconds=seconds)
        return attrs.evolve(result, metrics={**result.metrics, **metrics},
                            virtual_seconds=result.virtual_seconds + seconds)

    def unmask(self, model: nn.Module, updates: Sequence[ClientUpdate], ctx: RoundContext
               ) -> tuple[ClientUpdate | None, dict[str, float], float]:
        missing = [u.client_id for u in updates if META_NONCE not in u.meta]
        if missing:
            raise ConfigError(f"secagg received updates of clients {missing[:5]} that were not masked on the "
                              f"client: the cohort slot must run under the secagg wrapper")
        names = sorted(updates[0].tensors)
        n, modulus = len(updates), self.ring()
        if n < 2:  # a semi-asynchronous round with one arrival: its sum would be its update
            log.warning("round %s: secure aggregation aborted, the global model is kept: one client's sum is its "
                        "update", ctx.round)
            return None, {"secagg_clients": float(n), "secagg_aborted": 1.0, "secagg_survivors": 0.0}, 0.0
        if n * (2 ** self.quant_bits - 1) >= modulus:
            raise ConfigError(f"secagg: {n} clients of quant_bits={self.quant_bits} can overflow a "
                              f"{self.field_bits}-bit field; lower quant_bits or raise field_bits")
        order = sorted(range(n), key=lambda i: (updates[i].client_id, i))  # protocol ids: positions, so that a
        clients = {pid: SecAggClient(pid, int(updates[i].meta[META_NONCE]),  # client answering twice is two parties
                                     field.from_tensors(updates[i].tensors, names, self.field_bits), modulus)
                   for pid, i in enumerate(order)}
        real = {pid: updates[i].client_id for pid, i in enumerate(order)}
        k = self.degree if self.degree is not None else default_degree(n)
        k = min(k, n - 1)
        t = self.threshold_for(k) if n > 1 else 1
        dropped: dict[str, set[int]] = {}
        draws = ctx.np_rng("secagg-dropout")
        for pid in range(n):
            if self.dropout > 0 and draws.random() < self.dropout:
                dropped.setdefault(STAGES[int(draws.integers(len(STAGES)))], set()).add(pid)
        traffic: dict[tuple[str, int], list[Message]] = {}

        def book(message: Message) -> None:
            traffic.setdefault((message.stage, message.client), []).append(message)

        outcome = run_protocol(clients, degree=k, threshold=t, modulus=modulus, graph_rng=ctx.np_rng("secagg-graph"),
                               dropped=dropped, book=book, agree=cached_agreement())
        rows = [Transfer(round=ctx.round, client=real[m.client], direction=m.direction, kind=KINDS[m.stage],
                         nbytes=len(m.payload)) for msgs in traffic.values() for m in msgs]
        if ctx.run is not None:
            ctx.run.ledger.merge(rows)
        seconds = self.protocol_seconds(traffic, real, ctx)
        metrics = {"secagg_clients": float(n), "secagg_degree": float(k), "secagg_threshold": float(t),
                   "secagg_bytes": float(sum(r.nbytes for r in rows)), "secagg_seconds": seconds}
        if outcome.total is None:
            log.warning("round %s: secure aggregation aborted, the global model is kept: %s", ctx.round,
                        outcome.aborted)
            metrics.update(secagg_aborted=1.0, secagg_survivors=0.0)
            return None, metrics, seconds
        survivors = sorted(outcome.survivors)
        metrics["secagg_survivors"] = float(len(survivors))
        weights = [float(updates[order[pid]].meta[META_WEIGHT]) for pid in survivors]
        mean = field.dequantise_sum(outcome.total, len(survivors), self.clip_range, self.quant_bits) / sum(weights)
        current = model.state_dict()
        state, at = {}, 0
        for name in names:
            size = current[name].numel()
            change = torch.from_numpy(mean[at:at + size].copy()).reshape(current[name].shape).to(current[name].device)
            state[name] = (current[name].double() + change).to(current[name].dtype)
            at += size
        members = [{"client": real[pid], **{key: v for key, v in updates[order[pid]].meta.items()
                                            if str(key).startswith("dp.")}} for pid in survivors]
        released = ClientUpdate(client_id=-1, tensors=state, base={k_: current[k_].clone() for k_ in state},
                                num_examples=sum(updates[order[pid]].num_examples for pid in survivors),
                                version=ctx.server.version, meta={SUM_CLIENTS: len(survivors), SUM_MEMBERS: members})
        return released, metrics, seconds

    def protocol_seconds(self, traffic: dict[tuple[str, int], list[Message]], real: dict[int, int],
                         ctx: RoundContext) -> float:
        """Virtual seconds of the key and unmasking stages: per stage the slowest client (its messages over its
        links, as the clock prices a job's traffic); the masked input is the client's upload, priced in its job."""
        from fedcore.runtime import clock_of

        clock = clock_of(ctx.run)
        if clock is None or ctx.run is None:
            return 0.0
        total = 0.0
        for stage in ("advertise", "share", "unmask"):
            slowest = 0.0
            for (s, pid), messages in traffic.items():
                if s != stage:
                    continue
                profile = clock.profile_of(ctx.run.clients[real[pid]] if real[pid] < len(ctx.run.clients)
                                           else ClientInfo(id=real[pid], num_samples=0))
                up = sum(len(m.payload) for m in messages if m.direction == "up")
                down = sum(len(m.payload) for m in messages if m.direction == "down")
                slowest = max(slowest, 8.0 * up / profile.up_bps + 8.0 * down / profile.down_bps
                              + len(messages) * profile.latency_s)
            total += slowest
        return total


__all__ = ["KINDS", "SecAggPlus"]
