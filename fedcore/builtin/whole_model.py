"""The whole-model share: every client receives, trains and returns the full model (FedAvg's split)."""
from __future__ import annotations

from typing import Any

import attrs
from torch import nn

import fedcore
from fedcore.builtin.clone import clone_module
from fedcore.types import Share


def working_copy(model: nn.Module, client_id: int, ctx: Any) -> nn.Module:
    """A deep copy of ``model`` with the client's personalised download (if any) applied."""
    module = clone_module(model)  # copy.deepcopy semantics, ~3x cheaper (fedcore/builtin/clone.py)
    view = ctx.server.client_views.get(client_id) if ctx.run is not None else None
    if view:
        module.load_state_dict(view, strict=False)
    return module


@attrs.frozen(eq=False, kw_only=True)
class WholeModel:
    """Download every state entry; upload every floating entry (parameters and running statistics)."""

    @fedcore.hookimpl
    def fedcore_split_model(self, model: nn.Module, client: Any, ctx: Any) -> Share:
        module = working_copy(model, client.id, ctx)
        state = module.state_dict()
        return Share(module=module, download=tuple(state),
                     upload=tuple(k for k, v in state.items() if v.is_floating_point()))
