"""FedV's split slot (``fedv-share``): the cut, the random client init and the server's once-per-round encoder step.

Each client holds a head ``H_i`` (patch embedding) and a tail ``T_i`` (LayerNorm + linear classifier);
the server holds one pre-trained encoder ``E`` (tokens, position embedding, blocks, pooling). The
encoder is fixed during a round and takes one step per round from the sampled clients' last-batch
contributions: exact ``dL/dw_E`` (FedV, Eq. 4) or a two-point Gaussian SPSA estimate from two loss
values per client (FedVZ, Eq. 5). Heads and tails stay personal and are uploaded every ``fedround``
rounds (Alg. 1 l.20-21, the gate fires at t = 0); whichever aggregator fills the ``aggregate`` slot
averages them (the recipes: uniform FedAvg, the paper's 1/m) and ``aggregate_scope`` says who receives
the average. The encoder step is merged in by a ``fedcore_aggregate`` wrapper
(:func:`fedcore_split.finish_round`). Late sessions under asynchronous schedules: a late client's
gradient joins the step with the weight ``(1 + tau) ** -0.5`` (docs/split.md).
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import attrs
import torch
from torch import nn

import fedcore
from fedcore import RoundContext, RunContext
from fedcore.settings import setting
from fedcore.types import AggregateResult, ClientInfo, ClientState, ClientUpdate, Share
from fedcore_fedv.server import FedVServer
from fedcore_fedv.spsa import SPSA
from fedcore_split import (
    Segment,
    build_share,
    finish_round,
    layout_for,
    refuse_delta_aggregator,
    round_rule,
    server_state,
    stale_metrics,
    tiny_vit_check_plan,
)


@attrs.frozen(eq=False, kw_only=True)
class FedVShare:
    """Split slot of FedV/FedVZ: personal head and tail, a pre-trained encoder stepped once per round."""

    cut: str | int = setting("patch_embed", kind=(str, int), help="last stage of the client head")
    tail_from: str | int = setting("norm", kind=(str, int), help="first stage of the client tail")
    head_init: str = setting("random", choices=("random", "pretrained"),
                             help="Alg. 1 l.1: heads and tails start random; 'pretrained' keeps the PIT's "
                                  "patch embedding")
    lr_server: float = setting(1e-6, low=0.0, help="encoder learning rate (App. 0.A.2); 0 = frozen-encoder control")
    server_optimizer: str = setting("sgd", choices=("sgd", "adam"), help="Alg. 1 l.19 is plain SGD")
    server_lr_decay: float = setting(0.5, low=0.0, high=1.0, low_open=True, help="'decaying rate 0.5'")
    server_lr_decay_every: int | None = setting(None, kind=int, low=1, optional=True,
                                                help="rounds between decays; None = rounds // 4")
    fedround: int = setting(20, low=1, help="heads and tails are averaged when round % fedround == 0")
    aggregate_scope: str = setting("all", choices=("all", "participants"), help="who receives the average")
    server_batch_policy: str = setting("last", choices=("last", "all", "every_n"),
                                       help="which minibatches contribute to the encoder step (paper: last)")
    server_batch_every: int = setting(1, low=1, help="every_n: batches n, 2n, ... and the last one contribute")
    server_grad: str = setting("exact", choices=("exact", "zo"), help="exact: FedV (Eq. 4); zo: FedVZ (Eq. 5)")
    zo_eps: float = setting(1e-4, low=0.0, low_open=True, help="SPSA epsilon (App. 0.A.2), > 0")
    zo_num_directions: int = setting(1, low=1, help="SPSA directions per client per round, >= 1")
    zo_distribution: str = setting("gaussian", choices=("gaussian", "rademacher"))
    zo_estimator: str = setting("central", choices=("central", "forward"))
    zo_shared_direction: bool = setting(False, help="one z shared by all clients of a round")
    record_messages: bool = setting(False, help="keep every message for privacy audits (fedcore_fedv.inversion)")

    def spsa(self) -> SPSA:
        return SPSA(eps=self.zo_eps, num_directions=self.zo_num_directions, distribution=self.zo_distribution,
                    estimator=self.zo_estimator)

    def make_rule(self, model: nn.Module, layout: dict[str, tuple[str, ...]], ctx: RoundContext) -> FedVServer:
        every = self.server_lr_decay_every or max(1, (ctx.run.rounds if ctx.run is not None else 4) // 4)
        return FedVServer(model, layout["server"], mode=self.server_grad, lr=self.lr_server, state=server_state(ctx),
                          optimizer=self.server_optimizer, decay=self.server_lr_decay, decay_every=every,
                          spsa=self.spsa(), batch_policy=self.server_batch_policy,
                          batch_every=self.server_batch_every,
                          shared_direction=self.zo_shared_direction, round=ctx.round, seed=ctx.seed,
                          record=self.record_messages)

    @classmethod
    def __fedcore_checks__(cls) -> Any:  # how the contract checks build and run it (fedcore.testing.CheckPlan)
        from fedcore_fedv.train import FedVTrain

        return tiny_vit_check_plan(FedVTrain())

    @fedcore.hookimpl
    def fedcore_run_start(self, run: RunContext) -> None:
        """Alg. 1 l.1, once at t = 0: random heads and tails (the tail is always fresh).

        The server state is created here, not on first use, so a resumed run has it to load its checkpoint into.
        """
        server_state(run)
        model = run.server.model
        layout = layout_for(self, model)
        stages = layout["top"] + (layout["bottom"] if self.head_init == "random" else ())
        client = Segment(model, {"client": stages}, share=True)
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(int(run.rng("fedv-init").initial_seed()))
            for module in client.modules():
                reset = getattr(module, "reset_parameters", None)
                if module is not client and callable(reset):
                    reset()

    @fedcore.hookimpl
    def fedcore_split_model(self, model: nn.Module, client: ClientInfo, state: ClientState, ctx: RoundContext
                            ) -> Share:
        layout = layout_for(self, model)
        rule = round_rule(ctx, lambda: self.make_rule(model, layout, ctx), client.id)
        return build_share(model, layout, client, state, ctx, rule, personal=True, sync_every=self.fedround)

    def finish(self, result: AggregateResult, model: nn.Module, updates: Sequence[ClientUpdate],
               ctx: RoundContext) -> AggregateResult:
        """The aggregator's result with the encoder step and the head/tail bookkeeping merged in."""
        return finish_round(result, updates, ctx, weighting="uniform", scope=self.aggregate_scope,
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
        refuse_delta_aggregator(self, pipeline)  # heads and tails are personal between averagings
