"""The local training loop every method of this plugin shares, so that comparisons differ only in the share.

Cross-entropy on the share's trainable parameters, a fresh optimizer every round (stateless clients;
also needed once the LoRA rank changes shape), optional FedProx term ``(mu/2)·||w − w_g||²`` anchored
at the downloaded values (SA-FedLoRA Eq. 5), optional gradient-norm clipping (ViT-FL lineage).
"""
from __future__ import annotations

from typing import Any

import attrs
import torch
from torch import nn

from fedcore.data import batches
from fedcore.settings import setting
from fedcore.types import ClientData, ClientUpdate, Share


def train_trainable(module: nn.Module, data: ClientData, *, epochs: int, lr: float, optimizer: str = "sgd",
                    momentum: float = 0.9, weight_decay: float = 0.0, batch_size: int = 32, clip_norm: float = 0.0,
                    mu: float = 0.0, generator: torch.Generator | None = None) -> float:
    """Train the parameters of ``module`` that require grad; returns the mean training loss (CE only)."""
    module.train()
    params = [p for p in module.parameters() if p.requires_grad]
    if not params:
        raise ValueError("the share has no trainable parameters")
    if optimizer == "adam":
        opt: torch.optim.Optimizer = torch.optim.Adam(params, lr=lr, weight_decay=weight_decay)
    else:
        opt = torch.optim.SGD(params, lr=lr, momentum=momentum, weight_decay=weight_decay)
    anchor = [p.detach().clone() for p in params] if mu > 0 else None
    loss_sum, seen = 0.0, 0
    for _ in range(epochs):
        for x, y in batches(data.dataset, data.indices, batch_size, generator=generator):
            loss = nn.functional.cross_entropy(module(x), y)
            total = loss
            if anchor is not None:
                total = loss + 0.5 * mu * sum(((p - a) ** 2).sum() for p, a in zip(params, anchor))
            opt.zero_grad(set_to_none=True)
            total.backward()
            if clip_norm > 0:
                nn.utils.clip_grad_norm_(params, clip_norm)
            opt.step()
            loss_sum += float(loss.detach()) * len(y)
            seen += len(y)
    return loss_sum / max(seen, 1)


@attrs.frozen(eq=False, kw_only=True)
class Trainer:
    """Optimiser settings shared by SA-FedLoRA and its baselines (defaults: spec §3, ViT-FL lineage)."""

    optimizer: str = setting("sgd", choices=("sgd", "adam"))
    lr: float = setting(0.03, low=0.0, low_open=True, help="learning rate (paper: 0.03 SGD)")
    momentum: float = setting(0.9, low=0.0, high=1.0, high_open=True)
    weight_decay: float = setting(0.0, low=0.0)
    batch_size: int = setting(32, low=1)
    clip_norm: float = setting(1.0, low=0.0, help="gradient-norm clip (0 = off)")

    def train(self, client: Any, share: Share, data: ClientData, ctx: Any, *, epochs: int, mu: float = 0.0
              ) -> ClientUpdate:
        loss = train_trainable(share.module, data, epochs=epochs, lr=self.lr, optimizer=self.optimizer,
                               momentum=self.momentum, weight_decay=self.weight_decay, batch_size=self.batch_size,
                               clip_norm=self.clip_norm, mu=mu, generator=ctx.rng("shuffle"))
        return ClientUpdate.from_share(share, num_examples=len(data), metrics={"loss": loss})
