"""Aggregation for split shares in one call: FedAvg of the client segments, then the round's server rule.

Components fill the ``aggregate`` slot with any aggregator and finish the server in a wrapper
(:func:`fedcore_split.finish.finish_round`); this function is that pair with FedAvg, for code that
aggregates split updates itself.
"""
from __future__ import annotations

from collections.abc import Sequence

from fedcore import RoundContext
from fedcore.builtin import weighted_mean
from fedcore.types import AggregateResult, ClientUpdate
from fedcore_split.finish import finish_round


def aggregate_split(updates: Sequence[ClientUpdate], ctx: RoundContext, *, weighting: str = "samples",
                    scope: str = "all") -> AggregateResult:
    """Average uploaded client segments (``weighting``: ``samples`` or ``uniform``) and apply the server rule.

    The server rule sees only the clients whose updates reached aggregation, so whatever a client
    that failed or was rejected staged on the server is never used. ``scope="all"`` assigns the
    average to every client (they download it when next dispatched); ``"participants"`` only to
    the clients that uploaded.
    """
    weights = [float(u.num_examples) if weighting == "samples" else 1.0 for u in updates]
    result = AggregateResult(state=weighted_mean(updates, weights))
    return finish_round(result, updates, ctx, weighting=weighting, scope=scope)
