"""Aggregate slot of a distillation run: the server trains its model on the uploaded features, then sends
each client the server logits of its samples. No weights are averaged.

The server model is the global model's ``server`` (checkpointed with it); its Adam state and the plateau
scheduler persist in ``ServerState.stash`` across rounds and resumes (spec A21). Losses:
``hard-dist`` (FedVKD Eq. 13: CE(cls, y) + CE(dist, argmax z_edge)), ``soft-kd`` (FedGKT: CE + T^2 KL(edge ||
server)) and ``ce`` (FedML's runs with server-side KD off, ``whether_distill_on_the_server 0``).
Under an asynchronous schedule the server trains on the packets that arrived (``updates``) and records
their staleness.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

import attrs
import torch
from torch import nn
import torch.nn.functional as F

import fedcore
from fedcore import RoundContext
from fedcore.builtin import working_copy
from fedcore.settings import setting
from fedcore.stash import StashKey
from fedcore.types import AggregateResult, ClientUpdate, Upload
from fedcore_distill.evaluate import HEADS, pick_head, server_heads
from fedcore_distill.losses import soft_kd, two_head_loss
from fedcore_distill.messages import DOWNLINK_KINDS, TEACHER_IDS, TEACHER_LOGITS, FeaturePacket, check_feature_shapes
from fedcore_distill.share import require_kd_system

SERVER_OPTIMIZER = StashKey[dict]("distill.server-optimizer")
SERVER_SCHEDULER = StashKey[dict]("distill.server-scheduler")
FEATURE_STORE = StashKey[list]("distill.feature-store")
"""Packets kept for later aggregations (``feature_memory`` > 1 or ``async_scope = "store"``): a list of
``{"client", "round", "sample_ids", "features", "logits", "labels"}`` (checkpointed with the server stash)."""


def _heads(out: Any) -> tuple[torch.Tensor, torch.Tensor]:
    return (out[0], out[1]) if isinstance(out, tuple) else (out, out)


@attrs.frozen(eq=False, kw_only=True)
class KDServer:
    """Aggregate slot: persistent server trainer on uploaded features; per-client server logits as views."""

    merges: ClassVar[Upload] = Upload.FEATURES
    """Trains the server model on the clients' features and logits; it merges no weights."""

    loss: str = setting("hard-dist", choices=("hard-dist", "soft-kd", "ce"),
                        help="hard-dist: FedVKD; soft-kd: FedGKT; ce: FedGKT with server KD off (FedML runs)")
    w_ce: float = setting(1.0, low=0.0, help="weight of CE(cls, y) (Eq. 13: 1)")
    w_dist: float = setting(1.0, low=0.0, help="weight of CE(dist, argmax z_edge) (Eq. 13: 1); 0 = no dist token")
    kd_weight: float = setting(1.0, low=0.0, help="soft-kd: weight of T^2 KL(edge || server)")
    temperature: float = setting(3.0, low=0.0, low_open=True)
    epochs: int = setting(3, low=1, help="E_s: server epochs per round over the uploaded features")
    batch_size: int = setting(64, low=1)
    lr: float = setting(1e-3, low=0.0, low_open=True, help="Adam, amsgrad (FedML)")
    weight_decay: float = setting(1e-4, low=0.0)
    plateau_factor: float = setting(0.1, low=0.0, high=1.0, low_open=True, high_open=True)
    plateau_patience: int = setting(10, low=0)
    batch_order: str = setting("shuffle", choices=("shuffle", "client-sequential"),
                               help="minibatches across clients (A8); FedML goes client by client")
    logits_pass: str = setting("last-epoch", choices=("last-epoch", "eval"),
                               help="server logits from the last epoch in train mode (FedML) or an eval pass")
    server_logits_head: str = setting("mean", choices=HEADS,
                                      help="spec 002 A6: the server output sent back as soft labels")
    feature_memory: int = setting(1, low=1, help="spec 002 A21: the server trains on the packets of the last N "
                                                 "rounds (1 = the current round's only, the paper's); older "
                                                 "packets are kept on the server (feature_store_bytes)")
    async_scope: str = setting("arrival", choices=("arrival", "store"),
                               help="spec 002 Sec. 1.6 / A11: an aggregation trains on the arrived packets only "
                                    "('arrival') or on the feature store, the latest packet of every client "
                                    "('store'); the same under a barrier with every client")
    server_epochs_async: int | None = setting(None, kind=int, low=1, optional=True,
                                              help="spec 002 Sec. 1.6: server epochs of an aggregation that got "
                                                   "packets from fewer than all clients (an asynchronous arrival); "
                                                   "default: epochs")

    @classmethod
    def __fedcore_checks__(cls):  # type: ignore[no-untyped-def]
        from fedcore_distill.checks import distill_check_plan

        generic = "the generic aggregate checks feed weight updates; kd-server takes feature packets"
        return distill_check_plan(cls, expected_failures={
            "check_aggregate_identity": "trains the server on features; it never averages the updates",
            "check_aggregate_does_not_mutate": generic, "check_aggregate_single_client": generic,
            "check_aggregate_order_invariant": generic, "check_aggregate_stays_on_the_models_device": generic})

    def server_loss(self, out: Any, labels: torch.Tensor, edge_logits: torch.Tensor) -> torch.Tensor:
        cls_logits, dist_logits = _heads(out)
        if self.loss == "hard-dist":
            return two_head_loss(cls_logits, dist_logits, labels, edge_logits, w_ce=self.w_ce, w_dist=self.w_dist)
        loss = self.w_ce * F.cross_entropy(cls_logits, labels)
        if self.loss == "soft-kd" and self.kd_weight:
            loss = loss + self.kd_weight * soft_kd(dist_logits, edge_logits, self.temperature)
        return loss

    def _order(self, packets: Sequence[FeaturePacket], generator: torch.Generator) -> list[torch.Tensor]:
        n = sum(len(p.sample_ids) for p in packets)  # the arrived packets first, then those from the store
        if self.batch_order == "shuffle":
            return list(torch.randperm(n, generator=generator).split(self.batch_size))
        chunks, start = [], 0
        for p in packets:
            chunks += list((start + torch.randperm(len(p.sample_ids), generator=generator)).split(self.batch_size))
            start += len(p.sample_ids)
        return chunks

    @fedcore.hookimpl
    def fedcore_aggregate(self, model: nn.Module, updates: Sequence[ClientUpdate], ctx: RoundContext
                          ) -> AggregateResult:
        system = require_kd_system(model, "kd-server")
        arrived = sorted((FeaturePacket.from_update(u) for u in updates), key=lambda p: p.client_id)
        check_feature_shapes(arrived, system.feature_shape)
        stored = self._from_store(ctx, {p.client_id for p in arrived})
        packets = arrived + stored
        feats = torch.cat([p.features for p in packets]).float()
        labels = torch.cat([p.labels for p in packets])
        edge_logits = torch.cat([p.logits for p in packets])
        num_clients = len(ctx.run.clients) if ctx.run is not None else len(arrived)
        partial = len({p.client_id for p in arrived}) < num_clients
        epochs = self.server_epochs_async if partial and self.server_epochs_async is not None else self.epochs
        server = working_copy(system.server)
        opt = torch.optim.Adam(server.parameters(), lr=self.lr, weight_decay=self.weight_decay, amsgrad=True)
        sched = torch.optim.lr_scheduler.ReduceLROnPlateau(opt, mode="max", factor=self.plateau_factor,
                                                           patience=self.plateau_patience)
        stash = ctx.server.stash
        if SERVER_OPTIMIZER in stash:
            opt.load_state_dict(stash[SERVER_OPTIMIZER])
            sched.load_state_dict(stash[SERVER_SCHEDULER])
        generator = ctx.rng("server-order")
        server_logits = torch.zeros_like(edge_logits)
        server.train()
        total, correct, seen = 0.0, 0, 0
        for epoch in range(epochs):
            for idx in self._order(packets, generator):
                out = server(feats[idx])
                loss = self.server_loss(out, labels[idx], edge_logits[idx])
                opt.zero_grad()
                loss.backward()
                opt.step()
                if epoch == epochs - 1:
                    cls_logits, dist_logits = _heads(out)
                    mean = pick_head(cls_logits, dist_logits, self.server_logits_head).detach()
                    server_logits[idx] = mean
                    total += float(loss.detach()) * len(idx)
                    correct += int((mean.argmax(-1) == labels[idx]).sum())
                    seen += len(idx)
        if self.logits_pass == "eval":
            server.eval()
            with torch.no_grad():
                server_logits = torch.cat([pick_head(*server_heads(server, chunk), self.server_logits_head)
                                           for chunk in feats.split(256)])
        train_acc = correct / max(seen, 1)
        sched.step(train_acc)  # FedML steps on test accuracy; the server only sees its training accuracy
        stash[SERVER_OPTIMIZER] = opt.state_dict()
        stash[SERVER_SCHEDULER] = sched.state_dict()
        store_bytes = self._to_store(ctx, arrived)
        start = 0
        for p in arrived:  # each client's teacher logits stay on the server and go down with its next share
            n = len(p.sample_ids)
            ctx.server.aux.keep_for(p.client_id, TEACHER_IDS, p.sample_ids.clone(), kind=DOWNLINK_KINDS[TEACHER_IDS],
                                    send=True)
            ctx.server.aux.keep_for(p.client_id, TEACHER_LOGITS, server_logits[start:start + n].clone(),
                                    kind=DOWNLINK_KINDS[TEACHER_LOGITS], send=True)
            start += n
        staleness = [u.staleness for u in updates]
        state = {f"server.{k}": v for k, v in server.state_dict().items()}
        return AggregateResult(state=state, metrics={
            "server_loss": total / max(seen, 1), "server_train_accuracy": train_acc,
            "server_lr": float(opt.param_groups[0]["lr"]), "clients": float(len(arrived)),
            "server_epochs": float(epochs), "server_train_samples": float(len(labels)),
            "feature_store_bytes": float(store_bytes),
            "staleness_mean": sum(staleness) / max(len(staleness), 1),
            "staleness_max": float(max(staleness, default=0))})

    def _from_store(self, ctx: RoundContext, arrived: set[int]) -> list[FeaturePacket]:
        """Stored packets this aggregation trains on besides the arrived ones: those of the last ``feature_memory``
        rounds, and under ``async_scope = "store"`` the latest packet of every client that did not arrive."""
        entries = ctx.server.stash.get(FEATURE_STORE) or []
        latest: dict[int, dict[str, Any]] = {}
        for e in entries:
            if e["client"] not in arrived and (e["client"] not in latest or e["round"] > latest[e["client"]]["round"]):
                latest[e["client"]] = e
        chosen = [e for e in entries if ctx.round - int(e["round"]) < self.feature_memory]
        if self.async_scope == "store":
            chosen += [e for e in latest.values() if all(e is not c for c in chosen)]
        return [FeaturePacket(client_id=int(e["client"]), sample_ids=e["sample_ids"], features=e["features"],
                              logits=e["logits"], labels=e["labels"]) for e in chosen]

    def _to_store(self, ctx: RoundContext, arrived: Sequence[FeaturePacket]) -> int:
        """Keep what a later aggregation may train on; returns the store's size in bytes (0 with the paper's
        ``feature_memory = 1`` and ``async_scope = "arrival"``: nothing is kept)."""
        entries = (ctx.server.stash.get(FEATURE_STORE) or []) + [
            {"client": p.client_id, "round": ctx.round, "sample_ids": p.sample_ids, "features": p.features,
             "logits": p.logits, "labels": p.labels} for p in arrived]
        newest: dict[int, int] = {}
        for e in entries:
            newest[int(e["client"])] = max(newest.get(int(e["client"]), -1), int(e["round"]))
        kept = [e for e in entries
                if ctx.round + 1 - int(e["round"]) < self.feature_memory
                or (self.async_scope == "store" and int(e["round"]) == newest[int(e["client"])])]
        if kept:
            ctx.server.stash[FEATURE_STORE] = kept
        elif FEATURE_STORE in ctx.server.stash:
            del ctx.server.stash[FEATURE_STORE]
        return sum(sum(e[k].numel() * e[k].element_size() for k in ("sample_ids", "features", "logits", "labels"))
                   for e in kept)


__all__ = ["FEATURE_STORE", "SERVER_OPTIMIZER", "SERVER_SCHEDULER", "KDServer"]
