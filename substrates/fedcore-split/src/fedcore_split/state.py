"""Server-side split state that lives across rounds, and the client-side bookkeeping of personal segments.

The server segment's weights are part of the global model (checkpointed with it). What else the
server keeps between rounds (a persistent optimizer's state, when client segments were last averaged,
a method's counters) lives in :class:`SplitServerState` under ``ctx.server.stash[SERVER]``;
:meth:`SplitServerState.state_dict` gives plain values and tensors for ``torch.save``. The round's
:class:`~fedcore_split.endpoint.ServerRule` is round-scoped and never checkpointed: a round either
finished (its result is in the global model) or is re-run. Sessions still in flight under an
asynchronous schedule (``pending``) are not checkpointed either: after a resume their updates count as
stale sessions dropped (see :mod:`fedcore_split.finish`).
"""
from __future__ import annotations

from collections.abc import Callable
import copy
from typing import Any

import attrs
import torch

from fedcore.stash import StashKey
from fedcore.types import ClientState


@attrs.define(kw_only=True, eq=False)
class SplitServerState:
    """What the server of a split model remembers between rounds."""

    optimizer: dict[str, Any] | None = None
    last_sync: int = -1
    assigned: dict[int, int] = attrs.field(factory=dict)
    extra: dict[str, Any] = attrs.field(factory=dict)
    rule: Any = None
    rule_round: int = -1
    pending: dict[int, tuple[int, Any, int]] = attrs.field(factory=dict)  # client -> (round, rule, start) in flight
    starts: dict[int, int] = attrs.field(factory=dict)  # client -> how many sessions it was started for
    stale_counts: tuple[int, int, int] | None = None  # (round, applied, dropped) of the last round with stale sessions

    def sync_round_for(self, client_id: int) -> int:
        """The round of the last client-segment average this client must receive."""
        return max(self.last_sync, self.assigned.get(client_id, -1))

    def state_dict(self) -> dict[str, Any]:
        return {"optimizer": copy.deepcopy(self.optimizer), "last_sync": self.last_sync,
                "assigned": dict(self.assigned), "extra": copy.deepcopy(self.extra)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.optimizer = copy.deepcopy(state.get("optimizer"))
        self.last_sync = int(state.get("last_sync", -1))
        self.assigned = {int(k): int(v) for k, v in state.get("assigned", {}).items()}
        self.extra = copy.deepcopy(state.get("extra", {}))
        self.rule, self.rule_round = None, -1
        self.pending, self.starts, self.stale_counts = {}, {}, None


SERVER = StashKey[SplitServerState]("fedcore.split.server")
SYNCED = StashKey[int]("fedcore.split.synced")   # client stash: round at which its segments were last downloaded


def server_state(ctx: Any) -> SplitServerState:
    return ctx.server.stash.setdefault(SERVER, SplitServerState())


def round_rule(ctx: Any, factory: Callable[[], Any], client_id: int | None = None) -> Any:
    """This round's server rule, created by ``factory`` for the first client dispatched in the round.

    ``client_id``: the client being dispatched (its starts are counted, to tell its sessions apart).
    """
    srv = server_state(ctx)
    if client_id is not None:
        srv.starts[client_id] = srv.starts.get(client_id, 0) + 1
    if srv.rule is None or srv.rule_round != ctx.round:
        srv.rule, srv.rule_round = factory(), ctx.round
    return srv.rule


def take_rule(ctx: Any) -> Any:
    """This round's rule (or ``None``), removed from the state: aggregation consumes it once."""
    srv = server_state(ctx)
    rule = srv.rule if srv.rule_round == ctx.round else None
    srv.rule, srv.rule_round = None, -1
    return rule


def personal_entries(state: ClientState, ctx: Any) -> dict[str, torch.Tensor]:
    """The client's own segment values if they are newer than the last average it must receive, else ``{}``."""
    if not state.tensors:
        return {}
    srv = server_state(ctx)
    synced = state.stash.get(SYNCED)
    if synced is not None and synced > srv.sync_round_for(state.client_id):
        return state.tensors
    return {}
