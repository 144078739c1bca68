"""SA-FedLoRA's share: stage 1 the whole model, stage 2 the LoRA factors (+ head), the backbone once at the switch.

The stage is read from the global model (adapters present: stage 2, see :class:`SAFedLoRAPlan`), and the
share says it in its meta (a :class:`~fedcore_safedlora.stage_meta.ShareStage`) for the local update and in
``signature`` (``"stage1"``, ``"lora-r<r>"``) for stale updates under asynchronous schedules.
"""
from __future__ import annotations

from typing import Any

import attrs
from torch import nn

import fedcore
from fedcore.errors import ConfigError
from fedcore.settings import setting
from fedcore.types import ClientInfo, Share
from fedcore_lora import lora_share, matching_keys, subset_share
from fedcore_safedlora.plan import ANNEALING, INITIATING, INJECTED_AT, share_signature
from fedcore_safedlora.stage_meta import STAGE, ShareStage


@attrs.frozen(eq=False, kw_only=True)
class StageShare:
    """Stage 1: every parameter trained and sent; stage 2: only the LoRA factors (+ head) at the model's rank."""

    train_head_in_lora_stage: bool = setting(True, help="train and send the head with the factors")
    head_pattern: str = setting(r"^head\.", help="regex of the head's state entries")
    count_transition_broadcast: bool = setting(True, help="send the stage-1 backbone once at the switch")

    @classmethod
    def __fedcore_checks__(cls) -> Any:  # how the contract checks build and run it (fedcore.testing.CheckPlan)
        from fedcore.testing import CheckPlan, ContractFixture, tiny_vit

        return CheckPlan(fixture=ContractFixture(model_factory=tiny_vit))  # LoRA targets and a head: a ViT

    @fedcore.hookimpl
    def fedcore_run_start(self, run: fedcore.RunContext) -> None:
        model = run.server.model
        if self.train_head_in_lora_stage and not matching_keys(model, self.head_pattern,
                                                                setting=f"{type(self).__name__}.head_pattern"):
            tops = ", ".join(dict.fromkeys(k.split(".")[0] for k in model.state_dict()))
            raise ConfigError(f"{type(self).__name__}.head_pattern={self.head_pattern!r} matches no entry of this "
                              f"{type(model).__name__} (its top-level entries: {tops}); set it to the classifier's "
                              f"name or train_head_in_lora_stage=false")

    @fedcore.hookimpl
    def fedcore_split_model(self, model: nn.Module, client: ClientInfo, state: Any, ctx: fedcore.RoundContext) -> Share:
        signature = share_signature(model)
        if signature == "stage1":  # no adapters yet
            params = [n for n, _ in model.named_parameters()]
            share = subset_share(model, client.id, ctx, params, download=list(model.state_dict()),
                                 meta={STAGE: ShareStage(stage=INITIATING)})
            return attrs.evolve(share, signature=signature)
        injected = ctx.server.stash.get(INJECTED_AT, None)
        switch = self.count_transition_broadcast and injected is not None and 0 < injected == ctx.round
        share = lora_share(model, client.id, ctx, extra=self.head_pattern if self.train_head_in_lora_stage else None,
                           download_all=switch)
        return attrs.evolve(share, meta={**share.meta, STAGE: ShareStage(stage=ANNEALING, transition_broadcast=switch)},
                            signature=signature)
