"""Deprecated multi-slot classes (until 1.0): ``SplitLearning``, ``SplitFedV1``, ``SplitFedV2``, ``VanillaSL``.

They fill split + local update + aggregate (``VanillaSL`` also the schedule) with one object, so no
other aggregator can be used with them. Each is now a thin shell over the single-slot components
(``SplitShare``, ``SplitTrain``, FedAvg, ``SLTurns``) and gives the same runs bit for bit; they are
not registered under a name (``sl``, ``splitfed-v1``, ``splitfed-v2`` are recipes). Use
``fedcore.recipe("splitfed-v1", ...)`` or the components instead.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any
import warnings

import attrs
from torch import nn

import fedcore
from fedcore import RoundContext, RunContext
from fedcore.builtin import FedAvg
from fedcore.settings import setting
from fedcore.types import AggregateResult, ClientData, ClientInfo, ClientState, ClientUpdate, Share
from fedcore_split.components import SLTurns, SplitShare, SplitTrain, Turns


@attrs.frozen(eq=False, kw_only=True)
class SplitLearning:
    """Deprecated: use ``fedcore.recipe("splitfed-v2")`` (or ``SplitShare`` + ``SplitTrain`` + an aggregator)."""

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

    def __attrs_post_init__(self) -> None:
        warnings.warn(f"{type(self).__name__} fills several slots and is deprecated (removed in fedcore 1.0); use the "
                      f"recipe (fedcore.recipe(\"splitfed-v1\"), ...) or SplitShare + SplitTrain + an aggregator",
                      DeprecationWarning, stacklevel=3)

    @property
    def share(self) -> SplitShare:
        return SplitShare(cut=self.cut, tail_from=self.tail_from, server_update=self.server_update,
                          server_lr=self.server_lr, server_optimizer=self.server_optimizer,
                          server_momentum=self.server_momentum, server_weighting=self.weighting,
                          personal=self.personal, sync_every=self.sync_every, record_messages=self.record_messages)

    @property
    def train(self) -> SplitTrain:
        return SplitTrain(epochs=self.epochs, batch_size=self.batch_size, lr=self.lr, optimizer=self.optimizer,
                          momentum=self.momentum, weight_decay=self.weight_decay, bottom_grad=self.bottom_grad)

    def make_rule(self, model: nn.Module, layout: dict[str, tuple[str, ...]], ctx: RoundContext) -> Any:
        return self.share.make_rule(model, layout, ctx)

    @fedcore.hookimpl
    def fedcore_run_start(self, run: RunContext) -> None:
        self.share.fedcore_run_start(run=run)

    @fedcore.hookimpl
    def fedcore_split_model(self, model: nn.Module, client: ClientInfo, state: ClientState, ctx: RoundContext
                            ) -> Share:
        return self.share.fedcore_split_model(model=model, client=client, state=state, ctx=ctx)

    @fedcore.hookimpl
    def fedcore_local_update(self, client: ClientInfo, share: Share, data: ClientData, state: ClientState,
                             ctx: RoundContext) -> ClientUpdate:
        return self.train.fedcore_local_update(client=client, share=share, data=data, state=state, ctx=ctx)

    @fedcore.hookimpl
    def fedcore_aggregate(self, model: nn.Module, updates: Sequence[ClientUpdate], ctx: RoundContext
                          ) -> AggregateResult:
        inner = FedAvg(weighting=self.weighting).fedcore_aggregate(model=model, updates=updates, ctx=ctx)
        return self.share.finish(inner, model, updates, ctx)

    @fedcore.hookimpl
    def fedcore_collect_metrics(self, ctx: RoundContext) -> dict[str, float]:
        return self.share.fedcore_collect_metrics(ctx=ctx)


@attrs.frozen(eq=False, kw_only=True)
class SplitFedV1(SplitLearning):
    """Deprecated: use ``fedcore.recipe("splitfed-v1")``."""

    server_update: str = setting("copies", choices=("sequential", "copies", "frozen"))


@attrs.frozen(eq=False, kw_only=True)
class SplitFedV2(SplitLearning):
    """Deprecated: use ``fedcore.recipe("splitfed-v2")``."""

    server_update: str = setting("sequential", choices=("sequential", "copies", "frozen"))


@attrs.frozen(eq=False, kw_only=True)
class VanillaSL(SplitLearning):
    """Deprecated: use ``fedcore.recipe("sl")``."""

    server_update: str = setting("sequential", choices=("sequential", "copies", "frozen"))

    @fedcore.hookimpl
    def fedcore_make_scheduler(self, clients: Sequence[ClientInfo], run: RunContext) -> Turns:
        return SLTurns().fedcore_make_scheduler(clients=clients, run=run)
