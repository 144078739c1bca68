"""FedV and FedVZ (Shi, Zhang et al., "Heterogeneous Federated Learning with Splited Language Model") as recipes.

The method is three single-slot components: ``fedv-share`` (:class:`~fedcore_fedv.share.FedVShare`: the
cut, the encoder step), ``fedv-train`` (:class:`~fedcore_fedv.train.FedVTrain`: head and tail training)
and any aggregator for the heads and tails (the paper's uniform FedAvg by default). ``fedvz`` is FedV
with ``server_grad="zo"``.

``FedV`` / ``FedVZ`` below are deprecated multi-slot shells over those components (same runs bit for
bit), kept until 0.3.0 for Python code that built them directly; they are not registered by name.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any
import warnings

import attrs
from torch import nn

import fedcore
from fedcore import Recipe, RoundContext, RunContext
from fedcore.builtin import FedAvg
from fedcore.settings import setting
from fedcore.types import AggregateResult, ClientData, ClientInfo, ClientState, ClientUpdate, Share
from fedcore_fedv.share import FedVShare
from fedcore_fedv.train import FedVTrain

MICRO_VIT: dict[str, Any] = {"model": {"name": "micro-vit", "embed_dim": 32, "depth": 2, "num_heads": 2}}
"""The smallest run of these recipes (recipe matrix, smoke tests): a cut needs a ViT's named stages."""
LEARNING: dict[str, Any] = {"rounds": 5, "setup": {"pipeline": {"local_update": {"lr_client": 1e-2},
                                                                "split": {"lr_server": 1e-3, "fedround": 5}}}}
"""The learning check's setup (``fedcore.experiment.learning``): a random micro ViT and 16 samples a client, so
the paper's client Adam 2e-4 (5 steps a round) is raised to 1e-2; the encoder's SGD 1e-3 and ``fedround=5`` are
the README sweep's."""

RECIPES = {
    "fedv": Recipe(slots={"split": "fedv-share", "local_update": "fedv-train",
                          "aggregate": {"name": "fedavg", "weighting": "uniform"}, "schedule": "uniform",
                          "evaluate": "split-eval"},
                   help="FedV (Shi et al.): personal heads/tails on a pre-trained encoder, exact once-per-round step",
                   test_setup=MICRO_VIT, learning=LEARNING),
    "fedvz": Recipe(slots={"split": {"name": "fedv-share", "server_grad": "zo"}, "local_update": "fedv-train",
                           "aggregate": {"name": "fedavg", "weighting": "uniform"}, "schedule": "uniform",
                           "evaluate": "split-eval"},
                    help="FedVZ: FedV whose encoder step is a zeroth-order SPSA estimate from two losses per client",
                    test_setup=MICRO_VIT, learning=LEARNING),
}

_SHARE = tuple(a.name for a in attrs.fields(FedVShare))
_TRAIN = tuple(a.name for a in attrs.fields(FedVTrain))


@attrs.frozen(eq=False, kw_only=True)
class FedV:
    """Deprecated: use ``fedcore.recipe("fedv")`` (``fedv-share`` + ``fedv-train`` + any aggregator)."""

    cut: str | int = setting("patch_embed", kind=(str, int), help="last stage of the client head")
    tail_from: str | int = setting("norm", kind=(str, int), help="first stage of the client tail")
    head_init: str = setting("random", choices=("random", "pretrained"),
                             help="Alg. 1 l.1: heads and tails start random; 'pretrained' keeps the PIT's "
                                  "patch embedding")
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

    def __attrs_post_init__(self) -> None:
        warnings.warn(f"{type(self).__name__} fills several slots and is deprecated; use "
                      f"fedcore.recipe({type(self).__name__.lower()!r}) or FedVShare + FedVTrain + an aggregator",
                      DeprecationWarning, stacklevel=3)

    @property
    def share(self) -> FedVShare:
        return FedVShare(**{k: getattr(self, k) for k in _SHARE})

    @property
    def train(self) -> FedVTrain:
        return FedVTrain(**{k: getattr(self, k) for k in _TRAIN})

    def spsa(self) -> Any:
        return self.share.spsa()

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
        inner = FedAvg(weighting=self.aggregate_weighting).fedcore_aggregate(model=model, updates=updates, ctx=ctx)
        return self.share.finish(inner, model, updates, ctx)

    @fedcore.hookimpl
    def fedcore_collect_metrics(self, ctx: RoundContext) -> dict[str, float]:
        return self.share.fedcore_collect_metrics(ctx=ctx)


@attrs.frozen(eq=False, kw_only=True)
class FedVZ(FedV):
    """Deprecated: use ``fedcore.recipe("fedvz")``."""

    server_grad: str = setting("zo", choices=("exact", "zo"), help="exact: FedV (Eq. 4); zo: FedVZ (Eq. 5)")
