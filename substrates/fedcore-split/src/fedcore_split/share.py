"""Building a client's split share: its own segments, what crosses, and the server endpoint.

The client's module is a :class:`~fedcore_split.stages.Segment` with parts ``bottom`` (and ``top`` for a
U-shaped split) holding copies of the global model's client stages under their global names. With
``personal=True`` the client keeps its segments between averagings (``ClientState.tensors``, never
sent) and downloads the global ones only when an average newer than its copy exists; uploads happen
only in rounds where ``round % sync_every == 0`` (FedV's ``fedround`` gate).
"""
from __future__ import annotations

from typing import Any

from torch import nn

from fedcore.types import ClientState, Share
from fedcore_split.endpoint import Endpoint, ServerRule
from fedcore_split.stages import Segment
from fedcore_split.state import SYNCED, personal_entries


def build_share(model: nn.Module, layout: dict[str, tuple[str, ...]], client: Any, state: ClientState, ctx: Any,
                rule: ServerRule, *, personal: bool = False, sync_every: int = 1) -> Share:
    parts = {"bottom": layout["bottom"]}
    if layout["top"]:
        parts["top"] = layout["top"]
    module = Segment(model, parts)
    names = list(module.state_dict())
    own = personal_entries(state, ctx) if personal else {}
    if own:
        module.load_state_dict({k: own[k] for k in names if k in own}, strict=False)
        download: tuple[str, ...] = tuple(k for k in names if k not in own)
    else:
        download = tuple(names)
        state.stash[SYNCED] = ctx.round
    floats = tuple(k for k, v in module.state_dict().items() if v.is_floating_point())
    upload = floats if ctx.round % sync_every == 0 else ()
    meta = {"bottom": layout["bottom"], "server": layout["server"], "top": layout["top"], "rule": rule.name,
            "personal": personal, "used_personal": bool(own), "sync_round": ctx.round % sync_every == 0}
    return Share(module=module, download=download, upload=upload,  # type: ignore[arg-type]  # attrs converter=tuple:
                 endpoint=Endpoint(rule, client.id), meta=meta)        # mypy cannot solve tuple's type variable


def remember(share: Share, state: ClientState) -> None:
    """Keep the client's trained segments on the client (personal mode only)."""
    if share.meta.get("personal"):
        state.tensors = {k: v.detach().clone() for k, v in share.module.state_dict().items()}
