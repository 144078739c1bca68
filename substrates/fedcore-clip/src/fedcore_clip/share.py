"""The prompt share: only the shared context vectors are downloaded, trained and uploaded.

The frozen CLIP stays on the device (every client holds it already; it is never sent). A personalised
download left by the aggregator (``ctx.server.client_views``, PromptAMP's cloud prompts) is applied by
the engine and replaces the global context for that client; personal context (PromptPer's
``prompt.ctx_personal``) is restored from the client's own ``ClientState.tensors`` and never crosses the network.
"""
from __future__ import annotations

from typing import Any

import attrs

import fedcore
from fedcore.errors import ConfigError
from fedcore.types import ClientState, Share
from fedcore_clip.learner import PromptedCLIP


def require_prompted(model: Any, who: str) -> PromptedCLIP:
    if not isinstance(model, PromptedCLIP):
        raise ConfigError(f"{who} needs a fedcore_clip.PromptedCLIP model (frozen CLIP + CoOp prompt), "
                          f"got {type(model).__name__}; build one with fedcore_clip.prompted_clip(...)")
    return model


@attrs.frozen(eq=False, kw_only=True)
class PromptShare:
    """Share = the prompt's shared context; the backbone is frozen and stays on the client."""

    @classmethod
    def __fedcore_checks__(cls) -> Any:  # how the contract checks build and run it (fedcore.testing.CheckPlan)
        from fedcore.testing import CheckPlan
        from fedcore_clip.testing import WHOLE_MODEL_PROMPT_FIXTURE

        return CheckPlan(fixture=WHOLE_MODEL_PROMPT_FIXTURE)

    @fedcore.hookimpl
    def fedcore_split_model(self, model: Any, client: Any, state: ClientState, ctx: Any) -> Share:
        model = require_prompted(model, "PromptShare")
        module = model.working_copy()
        personal = {k: v for k, v in state.tensors.items() if k in model.personal_names()}
        if personal:
            module.load_state_dict(personal, strict=False)
        shared = model.shared_names()
        n_shared = sum(module.get_parameter(n).numel() for n in shared)
        n_total = sum(p.numel() for p in module.parameters())
        return Share(module=module, download=shared, upload=shared,
                     meta={"share": "prompt", "shared_params": n_shared, "total_params": n_total,
                           "personal": list(model.personal_names())})
