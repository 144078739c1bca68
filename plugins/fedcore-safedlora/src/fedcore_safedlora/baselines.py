"""The single-slot pieces of the paper's baselines (§4.1.3); the recipes in :mod:`fedcore_safedlora.recipes`
combine them with the same local trainer as SA-FedLoRA.

* ``full-share``     (FedFFT) full fine-tuning, every entry sent down, parameters up.
* ``from-scratch``   observer: a seeded re-initialisation of every weight before round 0 (FedAvg, FedPer).
* ``bitfit-share``   (FedBit) only biases (+ head) are trained and sent.
* ``local-share``    (Local) each client trains its own model alone; nothing crosses the network.
* ``personal-sgd``   the shared trainer, then the share's personal entries are kept in ``ClientState.tensors``.

FedPer's split (``fedper-share``) and the evaluation of each client's personal model (``personal-eval``) are
fedcore-personal's components: the ``fedper`` and ``local`` recipes name them.
"""
from __future__ import annotations

from typing import Any, ClassVar

import attrs
import torch
from torch import nn

import fedcore
from fedcore.rng import derive_seed
from fedcore.settings import setting
from fedcore.types import ClientData, ClientInfo, ClientState, ClientUpdate, Share
from fedcore_lora import matching_keys, subset_share
from fedcore_personal import keep_personal, personal_copy
from fedcore_safedlora.training import Trainer


def reinitialise(model: nn.Module, seed: int) -> None:
    """Seeded fresh weights: timm's ``init_weights`` when the model has it, else every ``reset_parameters``."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        for module in model.modules():
            reset = getattr(module, "reset_parameters", None)
            if callable(reset) and module is not model:
                reset()
        init_weights = getattr(model, "init_weights", None)
        if callable(init_weights):
            init_weights()


@attrs.frozen(eq=False, kw_only=True)
class FromScratch:
    """Re-initialise the global model (seeded) before round 0: the paper's FedAvg and FedPer "from scratch"."""

    @fedcore.hookimpl
    def fedcore_round_start(self, ctx: fedcore.RoundContext) -> None:
        if ctx.round == 0:
            reinitialise(ctx.server.model, derive_seed(ctx.seed, "from-scratch-init"))


@attrs.frozen(eq=False, kw_only=True)
class FullShare:
    """Federated full fine-tuning (FedFFT): every parameter is trained, every entry sent down, parameters up."""

    @fedcore.hookimpl
    def fedcore_split_model(self, model: nn.Module, client: ClientInfo, state: ClientState,
                            ctx: fedcore.RoundContext) -> Share:
        params = [n for n, _ in model.named_parameters()]
        return subset_share(model, client.id, ctx, params, download=list(model.state_dict()))


@attrs.frozen(eq=False, kw_only=True)
class BitFitShare:
    """FedBit (BitFit in FL): only bias vectors and the head are trained and communicated."""

    pattern: str = setting(r"\.bias$|^head\.", help="regex of the entries trained and sent")

    @fedcore.hookimpl
    def fedcore_split_model(self, model: nn.Module, client: ClientInfo, state: ClientState,
                            ctx: fedcore.RoundContext) -> Share:
        params = dict(model.named_parameters())
        keys = [k for k in matching_keys(model, self.pattern, setting="BitFitShare.pattern") if k in params]
        if not keys:
            raise fedcore.ConfigError(f"BitFitShare.pattern={self.pattern!r} matches no parameter of this "
                                      f"{type(model).__name__}")
        return subset_share(model, client.id, ctx, keys)


class _PersonalChecks:
    @classmethod
    def __fedcore_checks__(cls) -> Any:  # how the contract checks build and run it (fedcore.testing.CheckPlan)
        from fedcore.testing import CheckPlan, ContractFixture, tiny_vit

        return CheckPlan(fixture=ContractFixture(model_factory=tiny_vit))  # personal entries: the ViT's head


@attrs.frozen(eq=False, kw_only=True)
class LocalShare(_PersonalChecks):
    """Local training only: each client trains its own whole model; nothing crosses the network."""

    @fedcore.hookimpl
    def fedcore_split_model(self, model: nn.Module, client: ClientInfo, state: ClientState,
                            ctx: fedcore.RoundContext) -> Share:
        share = subset_share(personal_copy(model, state), client.id, ctx, [n for n, _ in model.named_parameters()],
                             download=[])
        return attrs.evolve(share, upload=(), meta={"personal": tuple(share.module.state_dict())})


@attrs.frozen(eq=False, kw_only=True)
class PersonalUpdate(Trainer):
    """Train ``epochs`` epochs, then keep the share's personal entries (``meta["personal"]``) on the client."""

    keeps_personal: ClassVar[bool] = True  # fedcore-personal's splits look for a component that keeps them

    epochs: int = setting(2, low=1, help="local epochs per round")

    @fedcore.hookimpl
    def fedcore_local_update(self, client: ClientInfo, share: Share, data: ClientData, state: ClientState,
                             ctx: fedcore.RoundContext) -> ClientUpdate:
        update = self.train(client, share, data, ctx, epochs=self.epochs)
        keep_personal(share, state)
        return update
