"""Ditto's local update (Li, Hu, Beirami, Smith, ICML 2021, Algorithm 1).

A client trains two models from the global model ``w^t`` it downloaded:

* the global one, exactly as the ``sgd`` local update would (same settings, same shuffles), and uploads it: the
  global model of a Ditto run is the global model of FedAvg with the same settings;
* its personal model ``v_k`` (kept in ``ClientState.tensors``, never sent; ``v_k = w^t`` at its first round) for
  ``personal_epochs`` epochs on ``F_k(v) + (λ/2)·||v − w^t||²``, the proximal term anchored at the downloaded
  global parameters.

``personal-eval`` scores ``v_k`` (the client's overlay is its whole model).
"""
from __future__ import annotations

from typing import Any

import attrs
import torch
from torch import nn

import fedcore
from fedcore.builtin import SGDUpdate
from fedcore.errors import ConfigError
from fedcore.settings import setting
from fedcore.training import cross_entropy, train_epochs
from fedcore.types import ClientData, ClientInfo, ClientState, ClientUpdate, Share
from fedcore_personal.overlay import personal_copy


def proximal_loss(anchor: dict[str, torch.Tensor], lam: float) -> Any:
    """``loss(module, x, y) = CE + (λ/2) Σ ||p − anchor[p]||²`` over the module's trainable parameters."""
    def loss(module: nn.Module, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        value = cross_entropy(module, x, y)
        prox = sum(((p - anchor[n]) ** 2).sum() for n, p in module.named_parameters() if p.requires_grad)
        return value + 0.5 * lam * prox
    return loss


@attrs.frozen(eq=False, kw_only=True)
class DittoUpdate(SGDUpdate):
    """Ditto: the ``sgd`` update of the global model, plus a personal model trained toward it with weight λ."""

    lam: float = setting(0.1, low=0.0, help="λ: pull of the personal model toward the global one (0 = local training)")
    personal_epochs: int = setting(1, low=1, help="s: local epochs of the personal model per round")
    personal_lr: float | None = setting(None, kind=float, low=0.0, low_open=True, optional=True,
                                        help="learning rate of the personal model (default: lr)")

    def vectorised_plan(self, share: Share) -> None:  # type: ignore[override]
        """Not one ``train_epochs`` loop: a second, personal model trains after the global one."""
        return None

    @fedcore.hookimpl
    def fedcore_check_pipeline(self, pipeline: Any) -> None:
        split = pipeline.provider("split")
        if getattr(type(split), "keeps_entries_local", False):
            raise ConfigError(f"ditto-sgd keeps a whole personal model on each client; {type(split).__name__} keeps "
                              f"part of the model local too: use split = \"whole-model\"")

    @fedcore.hookimpl
    def fedcore_local_update(self, client: ClientInfo, share: Share, data: ClientData, state: ClientState,
                             ctx: fedcore.RoundContext) -> ClientUpdate:
        personal = personal_copy(share.module, state)       # v_k (w^t at its first round)
        anchor = {n: p.detach().clone() for n, p in share.module.named_parameters()}     # w^t
        plan = SGDUpdate.vectorised_plan(self, share).kwargs()
        loss = train_epochs(share.module, data, generator=ctx.rng("shuffle"), **plan)
        personal_plan = {**plan, "epochs": self.personal_epochs, "mu": None,
                         "lr": self.personal_lr if self.personal_lr is not None else self.lr}
        personal_loss = train_epochs(personal, data, generator=ctx.rng("ditto-personal"),
                                     loss=proximal_loss(anchor, self.lam), **personal_plan)
        state.tensors.update({k: v.detach().clone() for k, v in personal.state_dict().items()})
        return ClientUpdate.from_share(share, num_examples=len(data),
                                       metrics={"loss": loss, "personal_loss": personal_loss})
