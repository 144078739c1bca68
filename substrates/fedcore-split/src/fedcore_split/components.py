"""Split learning as single-slot components: the share (``split-share``), the client's training
(``split-train``) and vanilla SL's turn-taking (``sl-turns``).

``split-share`` fills the ``split`` slot: where the model is cut, the server rule and its settings.
It also wraps ``fedcore_aggregate`` (a wrapper, not a provider) to finish the server side of the
round around whichever aggregator fills that slot (:mod:`fedcore_split.finish`), so the client
segments are merged by FedAvg, a trimmed mean, FedBuff, ... The methods are recipes of these:

* ``sl``: vanilla split learning (Gupta & Raskar 2018; Vepakomma et al. 2018). One client per round,
  in a seeded round-robin order (``sl-turns``); the client segments are relayed through the server
  (FedAvg of one update), the server segment is stepped after every batch.
* ``splitfed-v1`` (Thapa et al., AAAI 2022): sampled clients in parallel, one server copy per client
  stepped per batch; copies and client segments are averaged at the end of the round.
* ``splitfed-v2``: clients in parallel, one server segment stepped per batch in the order the
  clients ran; client segments averaged.

The cut is chosen by stage name or index (``fedcore_split.stage_names(model)``).
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

import attrs
import numpy as np
from torch import nn

import fedcore
from fedcore import RoundContext, RunContext
from fedcore.errors import ConfigError
from fedcore.rng import numpy_generator
from fedcore.settings import setting
from fedcore.types import AggregateResult, ClientData, ClientInfo, ClientState, ClientUpdate, JobPlan, Share
from fedcore_split.endpoint import ServerRule
from fedcore_split.finish import finish_round, stale_metrics
from fedcore_split.plan import plan_split_job
from fedcore_split.rules import FrozenServer, SequentialServer, ServerCopies
from fedcore_split.share import build_share, remember
from fedcore_split.stages import split_layout
from fedcore_split.state import round_rule, server_state
from fedcore_split.train import train_split


def layout_for(component: Any, model: nn.Module) -> dict[str, tuple[str, ...]]:
    try:
        return split_layout(model, component.cut, component.tail_from)
    except ConfigError as exc:
        raise ConfigError(f"{type(component).__name__}.{exc}") from None


def refuse_delta_aggregator(component: Any, pipeline: fedcore.Pipeline) -> None:
    """Personal client segments start from values the server never sent, so no delta can be formed for them.

    Called from ``fedcore_check_pipeline`` by split components whose segments are personal: FedBuff's
    server step (``fedbuff``) needs every update's base; aggregators of uploaded values work.
    """
    from fedcore.builtin import FedBuffStep

    aggregator = pipeline.provider("aggregate")
    if isinstance(aggregator, FedBuffStep):
        raise ConfigError(f"{type(component).__name__} keeps client segments personal (the server never sends "
                          f"their start values), so {type(aggregator).__name__} cannot form their deltas; use an "
                          f"aggregator of uploaded values (fedavg, fedasync, trimmed-mean, median)")


def tiny_vit_check_plan(*companions: Any) -> Any:
    """The contract checks' plan for a split component: a tiny timm ViT (named stages to cut), tiny data and the
    ``companions`` it needs in the pipeline (a share needs a split local update and vice versa)."""
    from fedcore.testing import CheckPlan, ContractFixture, tiny_data, tiny_vit

    return CheckPlan(fixture=ContractFixture(model_factory=tiny_vit, companions=companions,
                                             data_factory=lambda: tiny_data(n=48, n_test=24)))


@attrs.frozen(eq=False, kw_only=True)
class SplitShare:
    """Split slot: U-shaped (or two-part) split with a per-batch server; finishes the server around any aggregator.

    ``server_update``: ``sequential`` (one server segment stepped per batch, SplitFed V2 / SL),
    ``copies`` (a copy per client, averaged: SplitFed V1) or ``frozen`` (never updated).
    """

    cut: str | int = setting("patch_embed", kind=(str, int), help="last stage of the client's bottom segment")
    tail_from: str | int | None = setting("norm", kind=(str, int), optional=True,
                                          help="first stage of the client's top segment; None = two-part split")
    server_update: str = setting("sequential", choices=("sequential", "copies", "frozen"))
    server_lr: float = setting(1e-3, low=0.0, help="server segment learning rate (per batch)")
    server_optimizer: str = setting("sgd", choices=("sgd", "adam"))
    server_momentum: float = setting(0.0, low=0.0, high=1.0, high_open=True)
    server_weighting: str = setting("samples", choices=("samples", "uniform"),
                                    help="weights of the averaged server copies (server_update='copies')")
    personal: bool = setting(False, help="keep client segments on the client between averagings")
    sync_every: int = setting(1, low=1, help="client segments are uploaded and averaged every n rounds")
    record_messages: bool = setting(False, help="keep a transcript of every message (privacy audits)")

    def make_rule(self, model: nn.Module, layout: dict[str, tuple[str, ...]], ctx: RoundContext) -> ServerRule:
        kw: dict[str, Any] = dict(round=ctx.round, seed=ctx.seed, record=self.record_messages)
        if self.server_update == "frozen":
            return FrozenServer(model, layout["server"], **kw)
        if self.server_update == "copies":
            return ServerCopies(model, layout["server"], lr=self.server_lr, optimizer=self.server_optimizer,
                                momentum=self.server_momentum, **kw)
        return SequentialServer(model, layout["server"], lr=self.server_lr, optimizer=self.server_optimizer,
                                momentum=self.server_momentum, state=server_state(ctx), **kw)

    @classmethod
    def __fedcore_checks__(cls) -> Any:  # how the contract checks build and run it (fedcore.testing.CheckPlan)
        return tiny_vit_check_plan(SplitTrain())

    @fedcore.hookimpl
    def fedcore_run_start(self, run: RunContext) -> None:
        """The server state exists from the start, so a resumed run loads its checkpointed state into it."""
        server_state(run)

    @fedcore.hookimpl
    def fedcore_split_model(self, model: nn.Module, client: ClientInfo, state: ClientState, ctx: RoundContext
                            ) -> Share:
        layout = layout_for(self, model)
        rule = round_rule(ctx, lambda: self.make_rule(model, layout, ctx), client.id)
        return build_share(model, layout, client, state, ctx, rule, personal=self.personal,
                           sync_every=self.sync_every)

    def finish(self, result: AggregateResult, model: nn.Module, updates: Sequence[ClientUpdate],
               ctx: RoundContext) -> AggregateResult:
        """The aggregator's result with this round's server update merged in (:func:`finish_round`)."""
        return finish_round(result, updates, ctx, weighting=self.server_weighting,
                            make_rule=lambda: self.make_rule(model, layout_for(self, model), ctx))

    @fedcore.hookimpl(wrapper=True)
    def fedcore_aggregate(self, model: nn.Module, updates: Sequence[ClientUpdate], ctx: RoundContext) -> Any:
        result = yield
        return self.finish(result, model, updates, ctx)

    @fedcore.hookimpl
    def fedcore_collect_metrics(self, ctx: RoundContext) -> dict[str, float]:
        return stale_metrics(ctx)

    @fedcore.hookimpl
    def fedcore_check_pipeline(self, pipeline: fedcore.Pipeline) -> None:
        if self.personal:
            refuse_delta_aggregator(self, pipeline)


@attrs.frozen(eq=False, kw_only=True)
class SplitTrain:
    """Local-update slot: trains the client's split segments against the share's server endpoint."""

    epochs: int = setting(1, low=1, help="local epochs per round")
    batch_size: int = setting(32, low=1)
    lr: float = setting(1e-3, low=0.0, low_open=True, help="client learning rate")
    optimizer: str = setting("adam", choices=("sgd", "adam"))
    momentum: float = setting(0.0, low=0.0, high=1.0, high_open=True)
    weight_decay: float = setting(0.0, low=0.0)
    bottom_grad: str = setting("backprop", choices=("backprop", "zo", "frozen"),
                               help="how the client's bottom is trained (see fedcore_split.train)")
    zo_eps: float = setting(1e-3, low=0.0, low_open=True, help="activation perturbation for bottom_grad='zo'")
    keep_optimizer: bool = setting(False, help="the client's optimizer state persists across its rounds "
                                               "(kept on the client)")

    @classmethod
    def __fedcore_checks__(cls) -> Any:  # how the contract checks build and run it (fedcore.testing.CheckPlan)
        return tiny_vit_check_plan(SplitShare())

    @fedcore.hookimpl
    def fedcore_local_update(self, client: ClientInfo, share: Share, data: ClientData, state: ClientState,
                             ctx: RoundContext) -> ClientUpdate:
        if share.endpoint is None:
            raise ConfigError("SplitTrain trains split shares; the split slot gave a share with no server endpoint "
                              "(use split = \"split-share\" or a recipe: sl, splitfed-v1, splitfed-v2, fedv)")
        metrics = train_split(share, data, ctx, epochs=self.epochs, batch_size=self.batch_size, lr=self.lr,
                              optimizer=self.optimizer, momentum=self.momentum, weight_decay=self.weight_decay,
                              bottom_grad=self.bottom_grad, zo_eps=self.zo_eps,
                              keep_optimizer=state if self.keep_optimizer else None)
        remember(share, state)
        return ClientUpdate.from_share(share, num_examples=len(data), metrics=metrics)

    @fedcore.hookimpl
    def fedcore_plan_job(self, client: ClientInfo, share: Share, samples: int, example: Any, ctx: RoundContext
                         ) -> JobPlan | None:
        """The per-batch messages :func:`train_split` will send (:func:`fedcore_split.plan.plan_split_job`)."""
        if share.endpoint is None:
            return None
        return plan_split_job(share, samples, example, epochs=self.epochs, batch_size=self.batch_size,
                              bottom_grad=self.bottom_grad)


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
class SLTurns:
    """Schedule slot: clients take turns, one per round, in a seeded round-robin order (vanilla SL)."""

    asynchronous: ClassVar[bool] = False

    @fedcore.hookimpl
    def fedcore_make_scheduler(self, clients: Sequence[ClientInfo], run: RunContext) -> Turns:
        return Turns(ids=tuple(c.id for c in clients), seed=run.seed)
