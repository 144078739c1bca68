"""FedV's local-update slot (``fedv-train``): the client trains its head and tail against the encoder (Alg. 1-2).

Per batch the client sends ``h = H_i(x)`` up, gets ``b = E(h)``, computes its loss with ``T_i`` (labels
stay on the client), sends ``dL/db`` and trains ``H_i`` with the ``dL/dh`` it gets back. Defaults are
the paper's (App. 0.A.2).
"""
from __future__ import annotations

from typing import Any

import attrs

import fedcore
from fedcore import RoundContext
from fedcore.errors import ConfigError
from fedcore.settings import setting
from fedcore.types import ClientData, ClientInfo, ClientState, ClientUpdate, JobPlan, Share
from fedcore_split import plan_split_job, remember, train_split


@attrs.frozen(eq=False, kw_only=True)
class FedVTrain:
    """Local-update slot of FedV/FedVZ: Adam on the client's head and tail, the head by backprop, SPSA or frozen."""

    local_epochs: int = setting(5, low=1, help="local epochs per round (Sec. 4.3)")
    batch_size: int = setting(128, low=1, help="Sec. 4.1")
    lr_client: float = setting(2e-4, low=0.0, low_open=True, help="Adam learning rate of head and tail (App. 0.A.2)")
    client_optimizer: str = setting("adam", choices=("adam", "sgd"))
    client_weight_decay: float = setting(0.0, low=0.0)
    reset_client_optimizer_each_round: bool = setting(True, help="False: the client's Adam state persists "
                                                      "across its rounds (kept on the client)")
    head_grad_mode: str = setting("backprop", choices=("backprop", "zo", "frozen"),
                                  help="how the head is trained; 'zo'/'frozen' send no gradient (our extension)")
    head_zo_eps: float = setting(1e-3, low=0.0, low_open=True, help="activation perturbation for head_grad_mode='zo'")

    @classmethod
    def __fedcore_checks__(cls) -> Any:  # how the contract checks build and run it (fedcore.testing.CheckPlan)
        from fedcore_fedv.share import FedVShare
        from fedcore_split import tiny_vit_check_plan

        return tiny_vit_check_plan(FedVShare())

    @fedcore.hookimpl
    def fedcore_local_update(self, client: ClientInfo, share: Share, data: ClientData, state: ClientState,
                             ctx: RoundContext) -> ClientUpdate:
        if share.endpoint is None:
            raise ConfigError("FedVTrain trains split shares; the split slot gave a share with no server endpoint "
                              "(use split = \"fedv-share\" or recipe = \"fedv\")")
        metrics = train_split(share, data, ctx, epochs=self.local_epochs, batch_size=self.batch_size,
                              lr=self.lr_client, optimizer=self.client_optimizer,
                              weight_decay=self.client_weight_decay, bottom_grad=self.head_grad_mode,
                              zo_eps=self.head_zo_eps,
                              keep_optimizer=None if self.reset_client_optimizer_each_round else state)
        remember(share, state)
        return ClientUpdate.from_share(share, num_examples=len(data), metrics=metrics)

    @fedcore.hookimpl
    def fedcore_plan_job(self, client: ClientInfo, share: Share, samples: int, example: Any, ctx: RoundContext
                         ) -> JobPlan | None:
        """The per-batch messages of :func:`fedcore_split.train_split` (``fedcore_split.plan_split_job``)."""
        if share.endpoint is None:
            return None
        return plan_split_job(share, samples, example, epochs=self.local_epochs, batch_size=self.batch_size,
                              bottom_grad=self.head_grad_mode)
