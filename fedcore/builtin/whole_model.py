"""The whole-model share: every client receives, trains and returns the full model (FedAvg's split)."""
from __future__ import annotations

from typing import Any

import attrs
from torch import nn

import fedcore
from fedcore.builtin.clone import clone_module
from fedcore.contexts import RoundContext
from fedcore.types import ClientInfo, Share


def working_copy(model: nn.Module, client_id: int | None = None, ctx: RoundContext | None = None) -> nn.Module:
    """A deep copy of ``model`` for one client (``client_id`` and ``ctx`` are accepted for older callers).

    The engine applies the client's personalised download (``ctx.server.client_views``) to every share,
    so a split only cuts the share.
    """
    return clone_module(model)  # copy.deepcopy semantics, ~3x cheaper (fedcore/builtin/clone.py)


@attrs.frozen(eq=False, kw_only=True)
class WholeModel:
    """Download every state entry; upload every floating entry (parameters and running statistics)."""

    @fedcore.hookimpl
    def fedcore_split_model(self, model: nn.Module, client: ClientInfo, state: Any, ctx: RoundContext) -> Share:
        module = working_copy(model, client.id, ctx)
        state = module.state_dict()
        return Share(module=module, download=tuple(state),
                     upload=tuple(k for k, v in state.items() if v.is_floating_point()))
