"""Local training with SGD or Adam, with an optional FedProx proximal term (Li et al., MLSys 2020)."""
from __future__ import annotations

import attrs

import fedcore
from fedcore.contexts import RoundContext
from fedcore.settings import setting
from fedcore.training import TrainPlan, train_epochs
from fedcore.types import ClientData, ClientInfo, ClientState, ClientUpdate, Share


@attrs.frozen(eq=False, kw_only=True)
class SGDUpdate:
    """``epochs`` passes of minibatch training of the share's trainable parameters with cross-entropy.

    With ``mu > 0`` the loss gets FedProx's ``(mu/2)·||w − w_global||²`` over the trainable
    parameters, anchored at the values the client downloaded this round.
    """

    lr: float = setting(0.05, low=0.0, low_open=True, help="learning rate")
    epochs: int = setting(1, low=1, help="local epochs")
    batch_size: int = setting(32, low=1, help="minibatch size")
    optimizer: str = setting("sgd", choices=("sgd", "adam"), help="local optimizer")
    momentum: float = setting(0.0, low=0.0, high=1.0, high_open=True, help="SGD momentum")
    weight_decay: float = setting(0.0, low=0.0, help="L2 penalty of the optimizer")
    mu: float = setting(0.0, low=0.0, help="FedProx proximal coefficient (0 = plain local SGD)")

    def vectorised_plan(self, share: Share) -> TrainPlan:
        """This update's loop, for the ``vectorised`` cohort (see :class:`fedcore.training.TrainPlan`)."""
        return TrainPlan(epochs=self.epochs, lr=self.lr, optimizer=self.optimizer, momentum=self.momentum,
                         weight_decay=self.weight_decay, batch_size=self.batch_size,
                         mu=self.mu if self.mu > 0 else None)

    @fedcore.hookimpl
    def fedcore_local_update(
        self, client: ClientInfo, share: Share, data: ClientData, state: ClientState, ctx: RoundContext
    ) -> ClientUpdate:
        loss = train_epochs(share.module, data, generator=ctx.rng("shuffle"), **self.vectorised_plan(share).kwargs())
        return ClientUpdate.from_share(share, num_examples=len(data), metrics={"loss": loss})
