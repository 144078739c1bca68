"""Aggregation for split shares: FedAvg of the client segments, and the round's server rule commits."""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from fedcore.builtin import weighted_mean
from fedcore.types import AggregateResult, ClientUpdate
from fedcore_split.state import server_state, take_rule


def aggregate_split(updates: Sequence[ClientUpdate], ctx: Any, *, weighting: str = "samples",
                    scope: str = "all") -> AggregateResult:
    """Average uploaded client segments (``weighting``: ``samples`` or ``uniform``) and apply the server rule.

    The server rule sees only the clients whose updates reached aggregation, so whatever a client
    that failed or was rejected staged on the server is never used. ``scope="all"`` assigns the
    average to every client (they download it when next dispatched); ``"participants"`` only to
    the clients that uploaded.
    """
    weights = {u.client_id: float(u.num_examples) if weighting == "samples" else 1.0 for u in updates}
    carrying = [u for u in updates if u.tensors]
    state = weighted_mean(carrying, [weights[u.client_id] for u in carrying])
    metrics: dict[str, float] = {"segments_averaged": float(len(carrying))}
    if ctx.run is not None and carrying:
        srv = server_state(ctx)
        if scope == "all":
            srv.last_sync = ctx.round
        else:
            for u in carrying:
                srv.assigned[u.client_id] = ctx.round
    rule = take_rule(ctx) if ctx.run is not None else None
    if rule is not None:
        accepted = [u.client_id for u in updates]
        state.update(rule.finish(accepted, weights))
        metrics["server_sessions_used"] = float(len([c for c in rule.committed if c in accepted]))
        metrics["server_sessions_dropped"] = float(len(rule.sessions) - len([c for c in rule.committed
                                                                              if c in accepted]))
    return AggregateResult(state=state, metrics=metrics)
