"""FedRep's local update (Collins, Hassani, Mokhtari, Shakkottai, ICML 2021, Algorithm 1).

Each round a client first fits its personal head to the downloaded representation (``head_epochs`` epochs, body
frozen), then trains the representation with that head fixed (``epochs`` epochs, head frozen) and uploads the body.
The head is the share's ``meta["personal"]`` (``fedper-share``); ``keep-personal`` stores it for the next round.
With ``head_epochs = 0`` and the head trained jointly, this would be FedPer: use ``sgd`` for that.
"""
from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import attrs
from torch import nn

import fedcore
from fedcore.builtin import SGDUpdate
from fedcore.errors import ConfigError
from fedcore.settings import setting
from fedcore.training import train_epochs
from fedcore.types import ClientData, ClientInfo, ClientState, ClientUpdate, Share
from fedcore_personal.overlay import PERSONAL


@contextmanager
def only_trainable(module: nn.Module, names: set[str]) -> Iterator[None]:
    """Within the block, exactly the parameters in ``names`` (among those that required grad) require grad."""
    before = {n: p.requires_grad for n, p in module.named_parameters()}
    try:
        for n, p in module.named_parameters():
            p.requires_grad_(before[n] and n in names)
        yield
    finally:
        for n, p in module.named_parameters():
            p.requires_grad_(before[n])


@attrs.frozen(eq=False, kw_only=True)
class FedRepUpdate(SGDUpdate):
    """FedRep: ``head_epochs`` on the personal head with the body frozen, then ``epochs`` on the body with the head
    frozen (the ``sgd`` settings apply to both phases; FedProx's ``mu`` to the body phase)."""

    head_epochs: int = setting(10, low=1, help="τ_h: local epochs on the head first (the paper uses 10)")

    @classmethod
    def __fedcore_checks__(cls) -> Any:  # how the contract checks build and run it (fedcore.testing.CheckPlan)
        import attrs as _attrs

        from fedcore.testing import CHECK_FIXTURE, CheckPlan
        from fedcore_personal.keep import KeepPersonal
        from fedcore_personal.shares import FedPerShare

        return CheckPlan(fixture=_attrs.evolve(CHECK_FIXTURE, companions=[FedPerShare(), KeepPersonal()]))

    def vectorised_plan(self, share: Share) -> None:  # type: ignore[override]
        """Not one ``train_epochs`` loop: two phases with different trainable sets."""
        return None

    @fedcore.hookimpl
    def fedcore_local_update(self, client: ClientInfo, share: Share, data: ClientData, state: ClientState,
                             ctx: fedcore.RoundContext) -> ClientUpdate:
        head = set(share.meta.get(PERSONAL, ()))
        params = {n for n, p in share.module.named_parameters() if p.requires_grad}
        if not head & params:
            raise ConfigError("fedrep-sgd trains the share's personal head first; this share names none "
                              "(use split = \"fedper-share\")")
        plan = SGDUpdate.vectorised_plan(self, share).kwargs()
        with only_trainable(share.module, head):
            train_epochs(share.module, data, generator=ctx.rng("fedrep-head"), **{**plan, "epochs": self.head_epochs,
                                                                                  "mu": None})
        body = params - head
        loss = 0.0
        if body:
            with only_trainable(share.module, body):
                loss = train_epochs(share.module, data, generator=ctx.rng("shuffle"), **plan)
        return ClientUpdate.from_share(share, num_examples=len(data), metrics={"loss": loss})
