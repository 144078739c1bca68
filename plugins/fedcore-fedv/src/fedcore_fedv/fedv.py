"""FedV and FedVZ (Shi, Zhang et al., "Heterogeneous Federated Learning with Splited Language Model").

Each client holds a head ``H_i`` (patch embedding) and a tail ``T_i`` (LayerNorm + linear classifier);
the server holds one pre-trained encoder ``E`` (tokens, position embedding, blocks, pooling). Per
batch the client sends ``h = H_i(x)`` up, gets ``b = E(h)``, computes its loss with ``T_i`` (labels
stay on the client), sends ``dL/db`` and trains ``H_i`` with the ``dL/dh`` it gets back (Alg. 1-2).
The encoder is fixed during a round and takes one step per round from the sampled clients' last-batch
contributions: exact ``dL/dw_E`` (FedV, Eq. 4) or a two-point Gaussian SPSA estimate from two loss
values per client (FedVZ, Eq. 5). Heads and tails stay personal and are averaged (uniformly) every
``fedround`` rounds (Alg. 1 l.20-21, the gate fires at t = 0) and assigned to all clients.
Defaults are the paper's (App. 0.A.2); decisions where the paper is silent are in the README.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import attrs
import torch

import fedcore
from fedcore.settings import setting
from fedcore.types import ClientInfo, ClientUpdate, Share
from fedcore_fedv.server import FedVServer
from fedcore_fedv.spsa import SPSA
from fedcore_split import (
    Segment,
    aggregate_split,
    build_share,
    layout_for,
    remember,
    round_rule,
    server_state,
    train_split,
)


@attrs.frozen(eq=False, kw_only=True)
class FedV:
    """FedV: U-shaped federated split learning on a pre-trained ViT encoder, exact once-per-round encoder step."""

    cut: str | int = setting("patch_embed", kind=(str, int), help="last stage of the client head")
    tail_from: str | int = setting("norm", kind=(str, int), help="first stage of the client tail")
    head_init: str = setting("random", choices=("random", "pretrained"),
                             help="Alg. 1 l.1: heads and tails start random; 'pretrained' keeps the PIT's patch embedding")
    local_epochs: int = setting(5, low=1, help="local epochs per round (Sec. 4.3)")
    batch_size: int = setting(128, low=1, help="Sec. 4.1")
    lr_client: float = setting(2e-4, low=0.0, low_open=True, help="Adam learning rate of head and tail (App. 0.A.2)")
    client_optimizer: str = setting("adam", choices=("adam", "sgd"))
    client_weight_decay: float = setting(0.0, low=0.0)
    reset_client_optimizer_each_round: bool = setting(True, help="False: the client's Adam state persists "
                                                      "across its rounds (kept on the client)")
    lr_server: float = setting(1e-6, low=0.0, help="encoder learning rate (App. 0.A.2); 0 = frozen-encoder control")
    server_optimizer: str = setting("sgd", choices=("sgd", "adam"), help="Alg. 1 l.19 is plain SGD")
    server_lr_decay: float = setting(0.5, low=0.0, high=1.0, low_open=True, help="'decaying rate 0.5'")
    server_lr_decay_every: int | None = setting(None, kind=int, low=1, optional=True,
                                                help="rounds between decays; None = rounds // 4")
    fedround: int = setting(20, low=1, help="heads and tails are averaged when round % fedround == 0")
    aggregate_scope: str = setting("all", choices=("all", "participants"), help="who receives the average")
    aggregate_weighting: str = setting("uniform", choices=("uniform", "samples"), help="paper: 1/m")
    server_batch_policy: str = setting("last", choices=("last", "all", "every_n"),
                                       help="which minibatches contribute to the encoder step (paper: last)")
    server_batch_every: int = setting(1, low=1, help="every_n: batches n, 2n, ... and the last one contribute")
    head_grad_mode: str = setting("backprop", choices=("backprop", "zo", "frozen"),
                                  help="how the head is trained; 'zo'/'frozen' send no gradient (our extension)")
    head_zo_eps: float = setting(1e-3, low=0.0, low_open=True, help="activation perturbation for head_grad_mode='zo'")
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

    def _rule(self, model: Any, layout: dict, ctx: Any) -> FedVServer:
        every = self.server_lr_decay_every or max(1, (ctx.run.rounds if ctx.run is not None else 4) // 4)
        return FedVServer(model, layout["server"], mode=self.server_grad, lr=self.lr_server, state=server_state(ctx),
                          optimizer=self.server_optimizer, decay=self.server_lr_decay, decay_every=every,
                          spsa=self.spsa(), batch_policy=self.server_batch_policy,
                          batch_every=self.server_batch_every,
                          shared_direction=self.zo_shared_direction, round=ctx.round, seed=ctx.seed,
                          record=self.record_messages)

    @classmethod
    def __fedcore_checks__(cls) -> Any:  # how the contract checks build and run it (fedcore.testing.CheckPlan)
        from fedcore.testing import CheckPlan, ContractFixture, tiny_data, tiny_vit

        return CheckPlan(fixture=ContractFixture(model_factory=tiny_vit, data_factory=lambda: tiny_data(n=48, n_test=24)))

    @fedcore.hookimpl
    def fedcore_run_start(self, run: Any) -> None:
        """Alg. 1 l.1, once at t = 0: random heads and tails (the tail is always fresh)."""
        model = run.server.model
        layout = layout_for(self, model)
        stages = layout["top"] + (layout["bottom"] if self.head_init == "random" else ())
        client = Segment(model, {"client": stages}, share=True)
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(int(run.rng("fedv-init").initial_seed()))
            for module in client.modules():
                if module is not client and hasattr(module, "reset_parameters"):
                    module.reset_parameters()

    @fedcore.hookimpl
    def fedcore_split_model(self, model: Any, client: ClientInfo, state: Any, ctx: Any) -> Share:
        layout = layout_for(self, model)
        rule = round_rule(ctx, lambda: self._rule(model, layout, ctx))
        return build_share(model, layout, client, state, ctx, rule, personal=True, sync_every=self.fedround)

    @fedcore.hookimpl
    def fedcore_local_update(self, client: ClientInfo, share: Share, data: Any, state: Any, ctx: Any) -> ClientUpdate:
        metrics = train_split(share, data, ctx, epochs=self.local_epochs, batch_size=self.batch_size,
                              lr=self.lr_client, optimizer=self.client_optimizer,
                              weight_decay=self.client_weight_decay, bottom_grad=self.head_grad_mode,
                              zo_eps=self.head_zo_eps,
                              keep_optimizer=None if self.reset_client_optimizer_each_round else state)
        remember(share, state)
        return ClientUpdate.from_share(share, num_examples=len(data), metrics=metrics)

    @fedcore.hookimpl
    def fedcore_aggregate(self, model: Any, updates: Sequence[ClientUpdate], ctx: Any) -> Any:
        return aggregate_split(updates, ctx, weighting=self.aggregate_weighting, scope=self.aggregate_scope)


@attrs.frozen(eq=False, kw_only=True)
class FedVZ(FedV):
    """FedVZ: FedV whose encoder step is a zeroth-order SPSA estimate from two loss values per client (Eq. 5)."""

    server_grad: str = setting("zo", choices=("exact", "zo"), help="exact: FedV (Eq. 4); zo: FedVZ (Eq. 5)")
