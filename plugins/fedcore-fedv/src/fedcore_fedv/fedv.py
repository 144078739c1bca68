"""FedV and FedVZ (Shi, Zhang et al., "Heterogeneous Federated Learning with Splited Language Model") as recipes.

The method is three single-slot components: ``fedv-share`` (:class:`~fedcore_fedv.share.FedVShare`: the
cut, the encoder step), ``fedv-train`` (:class:`~fedcore_fedv.train.FedVTrain`: head and tail training)
and any aggregator for the heads and tails (the paper's uniform FedAvg by default). ``fedvz`` is FedV
with ``server_grad="zo"``.

``FedV`` / ``FedVZ`` below are deprecated multi-slot shells over those components (same runs bit for
bit), kept until 1.0 for Python code that built them directly; they are not registered by name. Their settings
are the components' own fields, built at import (no copy to keep in step).
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

class _FedVShell:
    """The deprecated multi-slot shell: ``fedv-share`` + ``fedv-train`` + FedAvg in one object, every hook
    forwarded to the components built from its settings (its settings are theirs: see :func:`_shell`)."""

    aggregate_weighting: str

    def __attrs_post_init__(self) -> None:
        warnings.warn(f"{type(self).__name__} fills several slots and is deprecated (removed in fedcore 1.0); use "
                      f"fedcore.recipe({type(self).__name__.lower()!r}) or FedVShare + FedVTrain + an aggregator",
                      DeprecationWarning, stacklevel=3)

    @property
    def share(self) -> FedVShare:
        return FedVShare(**{k.name: getattr(self, k.name) for k in attrs.fields(FedVShare)})

    @property
    def train(self) -> FedVTrain:
        return FedVTrain(**{k.name: getattr(self, k.name) for k in attrs.fields(FedVTrain)})

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


def _shell(name: str, doc: str, **defaults: Any) -> Any:
    """A deprecated shell class whose settings are the components' own fields (validators, help, defaults; a
    ``defaults`` entry changes one), plus the aggregator's weighting: nothing here can drift from them."""
    fields: dict[str, Any] = {
        a.name: attrs.field(default=defaults.get(a.name, a.default), converter=a.converter, validator=a.validator,
                            metadata=a.metadata)
        for component in (FedVShare, FedVTrain) for a in attrs.fields(component)}
    fields["aggregate_weighting"] = setting("uniform", choices=("uniform", "samples"), help="paper: 1/m")
    shell = attrs.make_class(name, fields, bases=(_FedVShell,), frozen=True, eq=False, kw_only=True)
    shell.__doc__, shell.__module__ = doc, __name__
    return shell


FedV = _shell("FedV", 'Deprecated: use ``fedcore.recipe("fedv")`` (``fedv-share`` + ``fedv-train`` + an aggregator).')
FedVZ = _shell("FedVZ", 'Deprecated: use ``fedcore.recipe("fedvz")``.', server_grad="zo")
