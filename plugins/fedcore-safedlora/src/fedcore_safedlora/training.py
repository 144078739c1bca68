"""The optimiser settings every method of this plugin shares, so that comparisons differ only in the share.

The loop is fedcore's :func:`fedcore.training.train_epochs`: cross-entropy on the share's trainable
parameters, a fresh optimizer every round (stateless clients; also needed once the LoRA rank changes
shape), optional FedProx term ``(mu/2)·||w − w_g||²`` anchored at the downloaded values (SA-FedLoRA
Eq. 5), optional gradient-norm clipping (ViT-FL lineage).
"""
from __future__ import annotations

from typing import Any
import warnings

import attrs
import torch
from torch import nn

import fedcore
from fedcore.settings import setting
from fedcore.training import TrainPlan, train_epochs
from fedcore.types import ClientData, ClientInfo, ClientUpdate, Share


def train_trainable(module: nn.Module, data: ClientData, *, epochs: int, lr: float, optimizer: str = "sgd",
                    momentum: float = 0.9, weight_decay: float = 0.0, batch_size: int = 32, clip_norm: float = 0.0,
                    mu: float = 0.0, generator: torch.Generator | None = None) -> float:
    """Deprecated since 0.1.1 (removed in 1.0): use :func:`fedcore.training.train_epochs`."""
    warnings.warn("fedcore_safedlora.train_trainable is deprecated and will be removed in 1.0; use "
                  "fedcore.training.train_epochs (mu=None for no proximal term)", DeprecationWarning, stacklevel=2)
    return train_epochs(module, data, epochs=epochs, lr=lr, optimizer=optimizer, momentum=momentum,
                        weight_decay=weight_decay, batch_size=batch_size, clip_norm=clip_norm,
                        mu=mu if mu > 0 else None, generator=generator)


@attrs.frozen(eq=False, kw_only=True)
class Trainer:
    """Optimiser settings shared by SA-FedLoRA and its baselines (defaults: spec §3, ViT-FL lineage)."""

    optimizer: str = setting("sgd", choices=("sgd", "adam"))
    lr: float = setting(0.03, low=0.0, low_open=True, help="learning rate (paper: 0.03 SGD)")
    momentum: float = setting(0.9, low=0.0, high=1.0, high_open=True)
    weight_decay: float = setting(0.0, low=0.0)
    batch_size: int = setting(32, low=1)
    clip_norm: float = setting(1.0, low=0.0, help="gradient-norm clip (0 = off)")

    def plan(self, *, epochs: int, mu: float = 0.0) -> TrainPlan:
        """The loop :meth:`train` runs (``vectorised_plan`` of the local updates built on it)."""
        return TrainPlan(epochs=epochs, lr=self.lr, optimizer=self.optimizer, momentum=self.momentum,
                         weight_decay=self.weight_decay, batch_size=self.batch_size, clip_norm=self.clip_norm,
                         mu=mu if mu > 0 else None)

    def train(self, client: ClientInfo, share: Share, data: ClientData, ctx: fedcore.RoundContext, *, epochs: int,
              mu: float = 0.0) -> ClientUpdate:
        plan = self.plan(epochs=epochs, mu=mu)
        loss = train_epochs(share.module, data, generator=ctx.rng("shuffle"), **plan.kwargs())
        return ClientUpdate.from_share(share, num_examples=len(data), metrics={"loss": loss})


@attrs.frozen(eq=False, kw_only=True)
class EpochsUpdate(Trainer):
    """The baselines' local update: ``epochs`` epochs of the shared trainer on the share's trainable entries."""

    epochs: int = setting(2, low=1, help="local epochs per round")

    def vectorised_plan(self, share: Share) -> TrainPlan:
        return self.plan(epochs=self.epochs)

    @fedcore.hookimpl
    def fedcore_local_update(self, client: ClientInfo, share: Share, data: ClientData, state: Any,
                             ctx: fedcore.RoundContext) -> ClientUpdate:
        return self.train(client, share, data, ctx, epochs=self.epochs)
