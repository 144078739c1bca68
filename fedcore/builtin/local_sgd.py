"""Local training with SGD or Adam, with an optional FedProx proximal term (Li et al., MLSys 2020)."""
from __future__ import annotations

from typing import Any

import attrs
import torch
from torch import nn

import fedcore
from fedcore.data.arrays import batches
from fedcore.settings import setting
from fedcore.types import ClientData, ClientUpdate, Share


def make_optimizer(name: str, params: list[nn.Parameter], lr: float, momentum: float, weight_decay: float
                   ) -> torch.optim.Optimizer:
    if name == "adam":
        return torch.optim.Adam(params, lr=lr, weight_decay=weight_decay)
    return torch.optim.SGD(params, lr=lr, momentum=momentum, weight_decay=weight_decay)


@attrs.frozen(eq=False, kw_only=True)
class SGDUpdate:
    """``epochs`` passes of minibatch training of the share's trainable parameters with cross-entropy.

    With ``mu > 0`` the loss gets FedProx's ``(mu/2)·||w − w_global||²`` over the trainable
    parameters, anchored at the values the client downloaded this round.
    """

    lr: float = setting(0.05, low=0.0, low_open=True, help="learning rate")
    epochs: int = setting(1, low=1, help="local epochs")
    batch_size: int = setting(32, low=1)
    optimizer: str = setting("sgd", choices=("sgd", "adam"))
    momentum: float = setting(0.0, low=0.0, high=1.0, high_open=True)
    weight_decay: float = setting(0.0, low=0.0)
    mu: float = setting(0.0, low=0.0, help="FedProx proximal coefficient (0 = plain local SGD)")

    @fedcore.hookimpl
    def fedcore_local_update(self, client: Any, share: Share, data: ClientData, state: Any, ctx: Any) -> ClientUpdate:
        model = share.module
        model.train()
        named = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
        params = [p for _, p in named]
        opt = make_optimizer(self.optimizer, params, self.lr, self.momentum, self.weight_decay)
        anchor = [p.detach().clone() for p in params] if self.mu > 0 else None
        gen = ctx.rng("shuffle")
        loss_sum, seen = 0.0, 0
        for _ in range(self.epochs):
            for x, y in batches(data.dataset, data.indices, self.batch_size, generator=gen):
                loss = nn.functional.cross_entropy(model(x), y)
                total = loss
                if anchor is not None:
                    total = loss + 0.5 * self.mu * sum(((p - a) ** 2).sum() for p, a in zip(params, anchor))
                opt.zero_grad(set_to_none=True)
                total.backward()
                opt.step()
                loss_sum += float(loss.detach()) * len(y)
                seen += len(y)
        return ClientUpdate.from_share(share, num_examples=len(data), metrics={"loss": loss_sum / max(seen, 1)})
