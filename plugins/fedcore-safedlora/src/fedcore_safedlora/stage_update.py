"""SA-FedLoRA's local update: E1 epochs with the proximal term in stage 1 (Eq. 5), E2 plain epochs in stage 2."""
from __future__ import annotations

from typing import Any

import attrs

import fedcore
from fedcore.settings import setting
from fedcore.training import TrainPlan
from fedcore.types import ClientData, ClientInfo, ClientUpdate, Share
from fedcore_safedlora.plan import INITIATING
from fedcore_safedlora.stage_meta import stage_of
from fedcore_safedlora.training import Trainer


@attrs.frozen(eq=False, kw_only=True)
class StageUpdate(Trainer):
    """Local SGD by the share's ``ShareStage``: E1 epochs + FedProx ``mu`` in stage 1, E2 epochs in stage 2."""

    e1_local_epochs: int = setting(30, low=1, help="local epochs E1 in the initiating stage")
    mu: float = setting(0.01, low=0.0, help="proximal coefficient of the initiating stage (Eq. 5)")
    e2_local_epochs: int = setting(2, low=1, help="local epochs E2 in the annealing stage")

    def vectorised_plan(self, share: Share) -> TrainPlan:
        """The stage's loop (``vectorised`` cohort): E1 epochs with ``mu``, or E2 plain epochs."""
        if stage_of(share.meta) == INITIATING:
            return self.plan(epochs=self.e1_local_epochs, mu=self.mu)
        return self.plan(epochs=self.e2_local_epochs)

    @fedcore.hookimpl
    def fedcore_local_update(self, client: ClientInfo, share: Share, data: ClientData, state: Any,
                             ctx: fedcore.RoundContext) -> ClientUpdate:
        plan = self.vectorised_plan(share)
        return self.train(client, share, data, ctx, epochs=plan.epochs, mu=plan.mu or 0.0)
