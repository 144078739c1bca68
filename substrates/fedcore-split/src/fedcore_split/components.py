"""Split-learning baselines as components: vanilla SL, SplitFed V1 and SplitFed V2.

Each fills the split, local-update and aggregate slots (vanilla SL also the schedule slot: clients
take turns), so one name in a config selects the whole protocol:

* ``sl``: vanilla split learning (Gupta & Raskar 2018; Vepakomma et al. 2018). One client per round,
  in a seeded round-robin order; the client segments are relayed through the server (the next client
  starts from the previous one's), the server segment is stepped after every batch.
* ``splitfed-v1`` (Thapa et al., AAAI 2022): sampled clients in parallel, one server copy per client
  stepped per batch; copies and client segments are averaged (FedAvg) at the end of the round.
* ``splitfed-v2``: clients in parallel, one server segment stepped per batch in the order the
  clients ran; client segments averaged (FedAvg).

The cut is chosen by stage name or index (``fedcore_split.stage_names(model)``).
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import attrs
import numpy as np

import fedcore
from fedcore.errors import ConfigError
from fedcore.rng import numpy_generator
from fedcore.settings import setting
from fedcore.types import ClientInfo, ClientUpdate, Share
from fedcore_split.aggregate import aggregate_split
from fedcore_split.rules import FrozenServer, SequentialServer, ServerCopies
from fedcore_split.share import build_share, remember
from fedcore_split.stages import split_layout
from fedcore_split.state import round_rule, server_state
from fedcore_split.train import train_split


def layout_for(component: Any, model: Any) -> dict[str, tuple[str, ...]]:
    try:
        return split_layout(model, component.cut, component.tail_from)
    except ConfigError as exc:
        raise ConfigError(f"{type(component).__name__}.{exc}") from None


@attrs.frozen(eq=False, kw_only=True)
class SplitLearning:
    """U-shaped (or two-part) split learning with a per-batch server and FedAvg of the client segments.

    ``server_update``: ``sequential`` (one server segment stepped per batch, SplitFed V2 / SL),
    ``copies`` (a copy per client, averaged: SplitFed V1) or ``frozen`` (never updated).
    """

    cut: str | int = setting("patch_embed", kind=(str, int), help="last stage of the client's bottom segment")
    tail_from: str | int | None = setting("norm", kind=(str, int), optional=True,
                                          help="first stage of the client's top segment; None = two-part split")
    server_update: str = setting("sequential", choices=("sequential", "copies", "frozen"))
    epochs: int = setting(1, low=1, help="local epochs per round")
    batch_size: int = setting(32, low=1)
    lr: float = setting(1e-3, low=0.0, low_open=True, help="client learning rate")
    optimizer: str = setting("adam", choices=("sgd", "adam"))
    momentum: float = setting(0.0, low=0.0, high=1.0, high_open=True)
    weight_decay: float = setting(0.0, low=0.0)
    server_lr: float = setting(1e-3, low=0.0, help="server segment learning rate (per batch)")
    server_optimizer: str = setting("sgd", choices=("sgd", "adam"))
    server_momentum: float = setting(0.0, low=0.0, high=1.0, high_open=True)
    bottom_grad: str = setting("backprop", choices=("backprop", "zo", "frozen"),
                               help="how the client's bottom is trained (see fedcore_split.train)")
    weighting: str = setting("samples", choices=("samples", "uniform"), help="FedAvg weights")
    personal: bool = setting(False, help="keep client segments on the client between averagings")
    sync_every: int = setting(1, low=1, help="client segments are uploaded and averaged every n rounds")
    record_messages: bool = setting(False, help="keep a transcript of every message (privacy audits)")

    def make_rule(self, model: Any, layout: dict[str, tuple[str, ...]], ctx: Any) -> Any:
        kw = dict(round=ctx.round, seed=ctx.seed, record=self.record_messages)
        if self.server_update == "frozen":
            return FrozenServer(model, layout["server"], **kw)
        if self.server_update == "copies":
            return ServerCopies(model, layout["server"], lr=self.server_lr, optimizer=self.server_optimizer,
                                momentum=self.server_momentum, **kw)
        return SequentialServer(model, layout["server"], lr=self.server_lr, optimizer=self.server_optimizer,
                                momentum=self.server_momentum, state=server_state(ctx), **kw)

    @classmethod
    def __fedcore_checks__(cls) -> Any:  # how the contract checks build and run it (fedcore.testing.CheckPlan)
        from fedcore.testing import CheckPlan, ContractFixture, tiny_data, tiny_vit

        return CheckPlan(fixture=ContractFixture(model_factory=tiny_vit, data_factory=lambda: tiny_data(n=48, n_test=24)))

    @fedcore.hookimpl
    def fedcore_split_model(self, model: Any, client: ClientInfo, state: Any, ctx: Any) -> Share:
        layout = layout_for(self, model)
        rule = round_rule(ctx, lambda: self.make_rule(model, layout, ctx))
        return build_share(model, layout, client, state, ctx, rule, personal=self.personal,
                           sync_every=self.sync_every)

    @fedcore.hookimpl
    def fedcore_local_update(self, client: ClientInfo, share: Share, data: Any, state: Any, ctx: Any) -> ClientUpdate:
        metrics = train_split(share, data, ctx, epochs=self.epochs, batch_size=self.batch_size, lr=self.lr,
                              optimizer=self.optimizer, momentum=self.momentum, weight_decay=self.weight_decay,
                              bottom_grad=self.bottom_grad)
        remember(share, state)
        return ClientUpdate.from_share(share, num_examples=len(data), metrics=metrics)

    @fedcore.hookimpl
    def fedcore_aggregate(self, model: Any, updates: Sequence[ClientUpdate], ctx: Any) -> Any:
        return aggregate_split(updates, ctx, weighting=self.weighting)


@attrs.frozen(eq=False, kw_only=True)
class SplitFedV1(SplitLearning):
    """SplitFed V1: parallel clients, one server copy per client stepped per batch, copies averaged per round."""

    server_update: str = setting("copies", choices=("sequential", "copies", "frozen"))


@attrs.frozen(eq=False, kw_only=True)
class SplitFedV2(SplitLearning):
    """SplitFed V2: parallel clients, one server segment stepped per batch in client order, FedAvg of clients."""

    server_update: str = setting("sequential", choices=("sequential", "copies", "frozen"))


@attrs.define(kw_only=True)
class Turns:
    """Policy: one idle client per round, each cycle a fresh seeded permutation of all clients."""

    ids: tuple[int, ...]
    seed: int

    def dispatch(self, *, round: int, now: float, idle: Sequence[int], busy: Sequence[int],
                 rng: np.random.Generator) -> list[int]:
        if busy:
            return []
        cycle, pos = divmod(round, len(self.ids))
        order = numpy_generator(self.seed, "sl-turns", cycle).permutation(np.asarray(self.ids))
        return [int(order[pos])]

    def ready(self, *, now: float, arrived: Sequence[ClientUpdate], busy: Sequence[int], since: float) -> bool:
        return not busy

    def accepts(self, update: ClientUpdate, *, version: int) -> bool:
        return False


@attrs.frozen(eq=False, kw_only=True)
class VanillaSL(SplitLearning):
    """Vanilla split learning: clients take turns (one per round), client segments relayed, server stepped per batch."""

    server_update: str = setting("sequential", choices=("sequential", "copies", "frozen"))

    @fedcore.hookimpl
    def fedcore_make_scheduler(self, clients: Sequence[ClientInfo], run: Any) -> Turns:
        return Turns(ids=tuple(c.id for c in clients), seed=run.seed)
