"""``tl-cohort``: the round's clients trained in lockstep against the tree server (thesis Alg. 1, Fig. 3.4-3.5).

Per iteration every client with a batch left forwards it through its part and sends the activation up its
own channel (horizontal: with the labels; vertical: the server holds the labels); the server merges the
tree, steps on the merged loss and sends each client the gradient of its own activation down its channel.

Schedules: ``pipelined`` (full TL: a client applies the gradient of batch t after forwarding batch t+1,
staleness 1, through the snapshot batch t was computed at; the first batch is synchronous and the last
gradient is flushed at the end), ``sync`` (each client waits for its gradient: SL with synchronous
aggregation, TL with optimal split only), ``round-robin`` (SL: one client at a time through its whole
shard, the client part relayed to the next client). Every gradient is applied exactly once.

Dropout with substitutes (thesis §3.3.3, spec A8.4): in round ``dropout_round`` ceil(fraction * clients)
seeded clients are offline for ``dropout_iterations`` iterations from ``dropout_start`` (the warm-up before
it is spec A9.8's). With ``substitute`` the server uses each missing client's latest stored activation
(and labels) and drops the gradient for that slot; the client's batches of the outage are lost. Without
it the server waits: the numbers are those of no dropout, only time is lost.

Client sync (spec 003a slot table: ``client_sync = 'none' | 'fedavg_common_layers'``, default ``none`` as in the
thesis, where client parts never leave their clients): with ``fedavg_common_layers`` every personal client-part
entry that several clients of the round hold is averaged at the round's end (one round is one epoch and one
re-partition period), weighted by the samples each trained on; every holder sends it up and gets the mean down as
``weights``. Units only one client holds are untouched.
"""
from __future__ import annotations

from collections.abc import Iterator, Sequence
import math
from typing import Any, ClassVar

import attrs
import torch

import fedcore
from fedcore import ClientFailed, ClientUpdate
from fedcore.data import batches
from fedcore.errors import ConfigError
from fedcore.settings import setting
from fedcore.types import JobPlan, Message, upload_messages
from fedcore_split import INPUT_GRAD, LABELS, SMASHED
from fedcore_treelearning.share import TreeShare
from fedcore_treelearning.share_meta import tree_part_of
from fedcore_treelearning.tree import HORIZONTAL, VERTICAL, ClientPart, TreeServer, UnitRange, unit_entries

SCHEDULES = ("pipelined", "sync", "round-robin")
CLIENT_SYNCS = ("none", "fedavg_common_layers")


def batch_size_of(share: Any) -> int:
    """The batch size the share's client streams at (``tl-share`` says it; 16 for a share that does not)."""
    part = tree_part_of(share.meta)
    return part.batch_size if part is not None else 16


class _Client:
    """One job in the lockstep: its part, its batch stream, its pending (delayed) gradient."""

    def __init__(self, job: Any, server: TreeServer, lr: float, momentum: float, stream: Iterator[Any]) -> None:
        self.job = job
        self.id = job.client.id
        self.split = server.splits[self.id]
        self.part = ClientPart(job.share.module, self.split, lr=lr, momentum=momentum)
        self.stream = stream
        self.channel = job.channel
        self.pending: tuple[torch.Tensor, list[torch.Tensor], torch.Tensor] | None = None
        self.sent = 0
        self.samples = 0

    def flush(self) -> None:
        if self.pending is not None:
            self.part.apply(*self.pending)
            self.pending = None


@attrs.frozen(eq=False, kw_only=True)
class TreeCohort:
    """Cohort slot: tree training of the round's clients (pipelined TL, synchronous tree, or SL round-robin)."""

    loss_scaling: ClassVar[bool] = False
    """The pipelined client and server steps have no loss scaling: precision = "fp16" is refused."""

    schedule: str = setting("pipelined", choices=SCHEDULES)
    lr: float = setting(0.01, low=0.0, low_open=True, help="client learning rate (SGD)")
    momentum: float = setting(0.9, low=0.0, high=1.0, high_open=True)
    epochs: int = setting(1, low=1, help="passes over each client's data per round")
    dropout_fraction: float = setting(0.0, low=0.0, high=1.0, help="share of clients offline during the outage")
    dropout_round: int = setting(0, low=0, help="round of the outage")
    dropout_start: int = setting(3, low=0, help="first iteration of the outage (after a warm-up)")
    dropout_iterations: int = setting(5, low=0, help="iterations the clients stay offline")
    substitute: bool = setting(True, help="use a missing client's latest activation instead of waiting")
    client_sync: str = setting("none", choices=CLIENT_SYNCS,
                               help="fedavg_common_layers: average the client-part units several clients hold at "
                                    "each round's end (sample-weighted, over the channel)")

    @classmethod
    def __fedcore_checks__(cls) -> Any:
        from fedcore_treelearning.checks import tree_check_plan
        return tree_check_plan(cls)

    @fedcore.hookimpl
    def fedcore_check_pipeline(self, pipeline: fedcore.Pipeline) -> None:
        share = pipeline.provider("split")
        if not isinstance(share, TreeShare):
            raise ConfigError(f"TreeCohort trains tree shares; the split slot holds {type(share).__name__}: use "
                              f"split = \"tl-share\" (or a recipe: tree-learning, sl-round-robin, ...)")
        if self.schedule == "round-robin" and share.mode == VERTICAL:
            raise ConfigError("TreeCohort.schedule='round-robin' needs horizontal data: in vertical mode every "
                              "client holds part of each sample, so no client can take a turn alone; use 'sync' "
                              "(SL with synchronous aggregation)")
        if share.relay != (self.schedule == "round-robin"):
            raise ConfigError(f"TreeShare.relay={share.relay} with TreeCohort.schedule={self.schedule!r}: the client "
                              f"part is relayed exactly in SL round-robin (relay=true with schedule='round-robin')")
        if share.relay and self.client_sync != "none":
            raise ConfigError(f"TreeCohort.client_sync={self.client_sync!r} averages personal client parts; with "
                              f"TreeShare.relay=true every client already trains the one relayed part: use "
                              f"client_sync='none'")

    @fedcore.hookimpl
    def fedcore_train_cohort(self, jobs: Sequence[Any], ctx: Any) -> list[ClientUpdate | ClientFailed]:
        server = jobs[0].share.endpoint
        if not isinstance(server, TreeServer) or any(job.share.endpoint is not server for job in jobs):
            raise ConfigError("TreeCohort needs every job's share to hold the round's TreeServer "
                              "(split = \"tl-share\")")
        server.schedule = "round-robin" if self.schedule == "round-robin" else self.schedule
        clients = [_Client(job, server, self.lr, self.momentum, self._stream(job, server, jobs, ctx)) for job in jobs]
        if self.schedule == "round-robin":
            self._turns(clients, server, ctx)
        else:
            self._lockstep(clients, server, ctx)
        if self.client_sync == "fedavg_common_layers":
            self._sync_common(clients)
        out: list[ClientUpdate | ClientFailed] = []
        for c in clients:
            own = unit_entries(c.job.share.module, 1, c.split - 1)
            sd = c.job.share.module.state_dict()
            part = tree_part_of(c.job.share.meta)
            if part is None or not part.relay:
                c.job.state.tensors = {**c.job.state.tensors, **{k: sd[k].detach().clone() for k in own}}
            out.append(ClientUpdate.from_share(c.job.share, num_examples=c.samples, client_id=c.id,
                                               metrics={"tl_split": float(c.split)}))
        return out

    @fedcore.hookimpl
    def fedcore_plan_job(self, client: Any, share: Any, samples: int, example: torch.Tensor, ctx: Any
                         ) -> JobPlan | None:
        """A dry run: per batch the client part's activation up (with the labels, horizontal), its gradient down.

        The activation's shape comes from the client's units on the meta ``example`` (its feature strip in vertical
        mode). Not modelled: the outage of ``dropout_fraction`` (its substituted batches send nothing) and
        ``client_sync`` (the common units' averaging depends on the whole cohort); a note says so."""
        server = share.endpoint
        if not isinstance(server, TreeServer):
            return None
        x = example
        if server.mode == VERTICAL:
            a, b = server.bounds[client.id]
            x = x[..., a:b]
        with torch.no_grad():
            h = UnitRange(share.module, 1, server.splits[client.id] - 1)(x)
        per_sample = h.numel() * h.element_size() // int(x.shape[0])
        bs = batch_size_of(share)
        sizes = [min(bs, samples - i) for i in range(0, samples, bs)] * self.epochs
        sent: dict[tuple[str, str, int], int] = {}
        for b in sizes:
            for key in [("up", SMASHED, b * per_sample), ("down", INPUT_GRAD, b * per_sample)] + (
                    [("up", LABELS, b * 8)] if server.mode == HORIZONTAL else []):
                sent[key] = sent.get(key, 0) + 1
        notes = []
        if self.dropout_fraction > 0 and ctx.round == self.dropout_round:
            notes.append("tl-cohort: the outage of this round is not modelled (substituted batches send nothing)")
        if self.client_sync != "none":
            notes.append("tl-cohort: client_sync is not modelled (the common units' averaging depends on the cohort)")
        messages = [Message(direction=d, kind=k, nbytes=n, count=c) for (d, k, n), c in sent.items()]
        return JobPlan(messages=(*messages, *upload_messages(share)), train_samples=0,
                       num_examples=samples * self.epochs, steps=len(sizes), batch_size=min(bs, max(samples, 1)),
                       notes=tuple(notes))

    @staticmethod
    def _sync_common(clients: list[_Client]) -> None:
        """FedAvg of the client-part entries several clients hold, weighted by samples, up and down as weights."""
        holders: dict[str, list[_Client]] = {}
        for c in clients:
            sd = c.job.share.module.state_dict()
            for k in unit_entries(c.job.share.module, 1, c.split - 1):
                if sd[k].is_floating_point():
                    holders.setdefault(k, []).append(c)
        common = {k: cs for k, cs in holders.items() if len(cs) > 1 and sum(c.samples for c in cs) > 0}
        sent: dict[int, dict[str, torch.Tensor]] = {}
        for c in clients:
            sd = c.job.share.module.state_dict()
            mine = {k: sd[k] for k, cs in common.items() if c in cs}
            if mine:
                sent[c.id] = c.channel.up("weights", mine)
        mean = {k: sum(sent[c.id][k] * (c.samples / sum(h.samples for h in cs)) for c in cs)
                for k, cs in common.items()}
        for c in clients:
            if c.id in sent:
                got = c.channel.down("weights", {k: mean[k] for k in sent[c.id]})
                c.job.share.module.load_state_dict(got, strict=False)

    # -- data ------------------------------------------------------------------------------------

    def _stream(self, job: Any, server: TreeServer, jobs: Sequence[Any], ctx: Any) -> Iterator[Any]:
        indices = tuple(job.select_data())
        bs = batch_size_of(job.share)
        if server.mode == HORIZONTAL:
            gen = job.ctx.rng("shuffle")
            return (b for _ in range(self.epochs) for b in batches(job.dataset, indices, bs, generator=gen))
        first = tuple(sorted(jobs[0].select_data())) if job is not jobs[0] else tuple(sorted(indices))
        if tuple(sorted(indices)) != first:
            raise ConfigError("vertical mode needs every client to hold the same samples (its own feature strip of "
                              "each): use partition = \"tl-vertical\"")
        gen = torch.Generator().manual_seed(int(ctx.seed_for("tl-vertical-order", client=-1)))
        a, b = server.bounds[job.client.id]
        ordered = tuple(sorted(indices))
        return ((x[..., a:b], y) for _ in range(self.epochs)
                for x, y in batches(job.dataset, ordered, bs, generator=gen))

    def _offline(self, ids: Sequence[int], ctx: Any) -> set[int]:
        if self.dropout_fraction <= 0 or ctx.round != self.dropout_round or self.dropout_iterations == 0:
            return set()
        k = min(len(ids), math.ceil(self.dropout_fraction * len(ids)))
        rng = ctx.np_rng("tl-dropout", client=-1)
        return {int(c) for c in rng.choice(sorted(ids), size=k, replace=False)}

    # -- schedules -------------------------------------------------------------------------------

    def _lockstep(self, clients: list[_Client], server: TreeServer, ctx: Any) -> None:
        offline = self._offline([c.id for c in clients], ctx)
        t = 0
        while True:
            inputs: dict[int, torch.Tensor] = {}
            labels: dict[int, torch.Tensor] = {}
            graphs: dict[int, tuple[torch.Tensor, list[torch.Tensor]]] = {}
            live = 0
            outage = self.substitute and self.dropout_start <= t < self.dropout_start + self.dropout_iterations
            for c in clients:
                batch = next(c.stream, None)
                if batch is None:
                    continue
                live += 1
                x, y = batch
                if outage and c.id in offline and c.id in server.stored:  # the server substitutes
                    inputs[c.id], stored_y = server.stored[c.id]
                    if server.mode == HORIZONTAL:
                        assert stored_y is not None
                        labels[c.id] = stored_y
                    server.substituted += 1
                    continue
                h, snap = c.part.forward(x)
                inputs[c.id] = c.channel.up(SMASHED, h.detach())
                if server.mode == HORIZONTAL:
                    labels[c.id] = c.channel.up(LABELS, y)
                server.stored[c.id] = (inputs[c.id], labels.get(c.id))
                graphs[c.id] = (h, snap)
                c.sent += 1
                c.samples += len(y)
                server.iterations[c.id] = server.iterations.get(c.id, 0) + 1
                if self.schedule == "pipelined":  # CB(t-1) after CF(t)
                    c.flush()
            if not live:
                break
            merged = server.merged_labels(labels) if server.mode == HORIZONTAL else y
            grads = server.step(inputs, merged)
            for c in clients:
                if c.id not in graphs:
                    continue
                g = c.channel.down(INPUT_GRAD, grads[c.id])
                h, snap = graphs[c.id]
                if self.schedule == "sync" or c.sent == 1:
                    c.part.apply(h, snap, g)
                else:
                    c.pending = (h, snap, g)
            t += 1
        for c in clients:
            c.flush()

    def _turns(self, clients: list[_Client], server: TreeServer, ctx: Any) -> None:
        order = [clients[i] for i in ctx.np_rng("tl-turns", client=-1).permutation(len(clients))]
        relayed: dict[str, torch.Tensor] | None = None
        for c in order:
            if relayed is not None:  # the previous turn's client part (sent up by it, down to this client)
                c.job.share.module.load_state_dict(relayed, strict=False)
                c.part = ClientPart(c.job.share.module, c.split, lr=self.lr, momentum=self.momentum)
            for x, y in c.stream:
                h, snap = c.part.forward(x)
                sent = c.channel.up(SMASHED, h.detach())
                y_sent = c.channel.up(LABELS, y)
                grads = server.step({c.id: sent}, y_sent)
                c.part.apply(h, snap, c.channel.down(INPUT_GRAD, grads[c.id]))
                c.sent += 1
                c.samples += len(y)
                server.iterations[c.id] = server.iterations.get(c.id, 0) + 1
            sd = c.job.share.module.state_dict()
            relayed = {k: sd[k].detach().clone() for k in c.job.share.upload}
        server.relay = relayed or {}
