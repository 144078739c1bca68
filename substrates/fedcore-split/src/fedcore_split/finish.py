"""The server side of a split round, finished around whichever aggregator fills the ``aggregate`` slot.

The client segments are ordinary uploaded entries: FedAvg, trimmed mean, median, FedBuff, ... merge
them like any model's. What no aggregator can do is the server segment's update, which never crossed
the network: the round's :class:`~fedcore_split.endpoint.ServerRule` holds it. :func:`finish_round`
takes the aggregator's result, applies the rule (averaged SplitFed V1 copies, the chain of SplitFed V2
steps, FedV's once-per-round encoder step) and the personal-segment bookkeeping, and returns the
merged result. The split component calls it from a ``fedcore_aggregate`` wrapper, so the slot stays free.

Stale sessions (asynchronous schedules): a client dispatched in round ``v`` whose update reaches
aggregation in round ``R > v`` ran against the rule of round ``v``. Its session is kept until it
arrives (or until the client is dispatched again) and then, per the rule's ``stale`` policy:

* ``"weight"`` (copies, FedV/FedVZ gradients, frozen): applied with the weight ``(1 + tau) ** -0.5``
  (``tau = R - v``, FedAsync's polynomial discount) on top of its usual weight;
* ``"drop"`` (sequential: SplitFed V2, vanilla SL): dropped, because its steps were taken on a server
  segment that has since been replaced and the optimizer state moved on; replaying them would undo newer steps.

Both are counted in the round's history row (``split_stale_applied``, ``split_stale_dropped``).
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
import logging
from typing import Any

import attrs

from fedcore import RoundContext
from fedcore.types import AggregateResult, ClientUpdate
from fedcore_split.endpoint import ServerRule, StaleSession
from fedcore_split.state import server_state, take_rule

log = logging.getLogger("fedcore")


def finish_round(result: AggregateResult, updates: Sequence[ClientUpdate], ctx: RoundContext, *,
                 make_rule: Callable[[], ServerRule] | None = None, weighting: str = "samples", scope: str = "all"
                 ) -> AggregateResult:
    """The aggregator's ``result`` with the server segment's new values and the split metrics merged in.

    ``weighting`` (``samples`` or ``uniform``) weighs the server contributions that are averaged
    (SplitFed V1 copies). ``scope="all"`` assigns the client-segment average to every client (they
    download it when next dispatched); ``"participants"`` only to the clients that uploaded.
    """
    if ctx.run is None:  # a bare hook call (no run): nothing on the server to finish
        return result
    srv = server_state(ctx)
    weights = {u.client_id: float(u.num_examples) if weighting == "samples" else 1.0 for u in updates}
    carrying = [u for u in updates if u.tensors]
    metrics: dict[str, float] = {"segments_averaged": float(len(carrying))}
    if carrying:
        if scope == "all":
            srv.last_sync = ctx.round
        else:
            for u in carrying:
                srv.assigned[u.client_id] = ctx.round
    fresh = [u.client_id for u in updates if u.version >= ctx.round]
    stale, lost = _stale_sessions(updates, ctx)
    rule = take_rule(ctx)
    if rule is None and stale and make_rule is not None:
        rule = make_rule()  # nobody was dispatched this round: a rule of this round, with no sessions, applies them
    state = dict(result.state)
    if rule is None and (stale or lost):
        srv.stale_counts = (ctx.round, 0, len(stale) + lost)
    if rule is not None:
        applied = stale if rule.stale == "weight" else []
        state.update(rule.finish(fresh, weights, stale=applied))
        used = len([c for c in rule.committed if c in fresh])
        waiting = _keep_waiting(rule, fresh, ctx)
        metrics["server_sessions_used"] = float(used)
        metrics["server_sessions_dropped"] = float(len(rule.sessions) - used - waiting)
        if waiting:
            metrics["server_sessions_waiting"] = float(waiting)
        dropped = lost + (len(stale) - len(applied))
        if stale or lost:
            srv.stale_counts = (ctx.round, len(applied), dropped)
            if dropped:
                log.info("round %s: dropped %d stale server session(s) (%s)", ctx.round, dropped,
                         "the sequential server segment they stepped has been replaced" if rule.stale == "drop"
                         else "their session was not kept: the client was dispatched again or the run resumed")
    return attrs.evolve(result, state=state, metrics={**dict(result.metrics), **metrics})


def _stale_sessions(updates: Sequence[ClientUpdate], ctx: RoundContext) -> tuple[list[StaleSession], int]:
    """The kept sessions of the stale updates, and how many stale updates have none (lost at resume)."""
    srv = server_state(ctx)
    found, lost = [], 0
    for u in updates:
        if u.version >= ctx.round:
            continue
        entry = srv.pending.pop(u.client_id, None)
        if entry is None or entry[0] != u.version or u.client_id not in entry[1].committed:
            lost += 1
            continue
        session = entry[1].sessions[u.client_id]
        found.append(StaleSession(session=session, staleness=ctx.round - u.version))
    return found, lost


def _keep_waiting(rule: ServerRule, fresh: Sequence[int], ctx: RoundContext) -> int:
    """Keep the committed sessions whose updates have not arrived (still in flight under an async schedule)."""
    srv = server_state(ctx)
    waiting = [c for c in rule.committed if c not in fresh]
    if rule.stale == "drop":
        return 0
    for c in waiting:
        srv.pending[c] = (ctx.round, rule)
    return len(waiting)


def stale_metrics(ctx: RoundContext) -> dict[str, float]:
    """``split_stale_applied`` / ``split_stale_dropped`` of this round (only in rounds that had stale sessions)."""
    if ctx.run is None:
        return {}
    counts = server_state(ctx).stale_counts
    if counts is None or counts[0] != ctx.round:
        return {}
    return {"split_stale_applied": float(counts[1]), "split_stale_dropped": float(counts[2])}
