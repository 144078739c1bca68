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
A client a continuous policy starts again before the round aggregates has two sessions in one round;
both count (the earlier one like a session of the round, ``agg_server_sessions_repeated``).
"""
from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
import logging

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
    arrivals = Counter(u.client_id for u in updates if u.version >= ctx.round)
    stale, applied_early, dropped = _stale_sessions(updates, ctx)
    rule = take_rule(ctx)
    if rule is None and stale and make_rule is not None:
        rule = make_rule()  # nobody was dispatched this round: a rule of this round, with no sessions, applies them
    state = dict(result.state)
    applied: list[StaleSession] = []
    if rule is None:
        dropped += len(stale)
    elif rule.stale == "drop":
        dropped += len(stale)
        state.update(rule.finish(sorted(arrivals), weights))
        used = [c for c in rule.committed if arrivals[c] > _started(rule, c)]
        _session_metrics(metrics, rule, len(used), _keep_waiting(rule, ctx, arrivals))
    else:
        applied = stale
        # a client's sessions arrive in the order they started: its latest one has arrived when it has
        # more updates here than earlier (repeated) sessions this round
        current = [c for c in sorted(arrivals) if c in rule.committed and arrivals[c] > _started(rule, c)]
        again = [StaleSession(session=s, staleness=0) for s in rule.repeated if s.client_id in arrivals]
        state.update(rule.finish(current, weights, stale=applied + again))
        _session_metrics(metrics, rule, len(current), _keep_waiting(rule, ctx, arrivals))
    _forget_finished(ctx)
    if stale or applied_early or dropped:
        srv.stale_counts = (ctx.round, len(applied) + applied_early, dropped)
        if dropped:
            log.info("round %s: dropped %d stale server session(s) (a sequential server segment they stepped "
                     "has been replaced, or their session was not kept across a resume)", ctx.round, dropped)
    return attrs.evolve(result, state=state, metrics={**dict(result.metrics), **metrics})


def _started(rule: ServerRule, client_id: int) -> int:
    """How many earlier sessions this client committed this round before its latest one."""
    return sum(1 for s in rule.repeated if s.client_id == client_id)


def _session_metrics(metrics: dict[str, float], rule: ServerRule, used: int, waiting: int) -> None:
    metrics["server_sessions_used"] = float(used)
    metrics["server_sessions_dropped"] = float(len(rule.sessions) - used - waiting)
    if waiting:
        metrics["server_sessions_waiting"] = float(waiting)
    if rule.repeated:
        metrics["server_sessions_repeated"] = float(len(rule.repeated))


def _stale_sessions(updates: Sequence[ClientUpdate], ctx: RoundContext) -> tuple[list[StaleSession], int, int]:
    """For the stale updates: their kept sessions, how many were applied early, how many have no session."""
    srv = server_state(ctx)
    found, early, lost = [], 0, 0
    for u in updates:
        if u.version >= ctx.round:
            continue
        entry = srv.pending.pop(u.client_id, None)
        if entry is None or entry[0] != u.version:
            lost += 1  # not kept across a resume
        elif entry[1] == APPLIED:
            early += 1
        elif entry[1] == DROP:
            lost += 1
        else:
            found.append(StaleSession(session=entry[1].sessions[u.client_id], staleness=ctx.round - u.version))
    return found, early, lost


APPLIED, DROP = "applied", "drop"  # pending markers: steps already in the segment / steps to drop on arrival


def _keep_waiting(rule: ServerRule, ctx: RoundContext, arrivals: Counter[int]) -> int:
    """Remember the committed sessions whose updates have not arrived (in flight under an async schedule).

    A sequential rule's chain is cut by client, so the latest steps of a client started twice this round
    are already in the segment (``APPLIED``); its other late sessions are dropped on arrival (``DROP``).
    """
    srv = server_state(ctx)
    waiting = [c for c in rule.committed if arrivals[c] <= _started(rule, c)]
    for c in waiting:
        mark = (APPLIED if c in arrivals else DROP) if rule.stale == "drop" else rule
        srv.pending[c] = (ctx.round, mark, srv.starts.get(c, 0))
    return len(waiting)


def _forget_finished(ctx: RoundContext) -> None:
    """Forget kept sessions whose client was started again: their update arrived (and was aggregated) or is lost."""
    srv = server_state(ctx)
    srv.pending = {c: e for c, e in srv.pending.items() if e[2] == srv.starts.get(c, 0)}


def stale_metrics(ctx: RoundContext) -> dict[str, float]:
    """``split_stale_applied`` / ``split_stale_dropped`` of this round (only in rounds that had stale sessions)."""
    if ctx.run is None:
        return {}
    counts = server_state(ctx).stale_counts
    if counts is None or counts[0] != ctx.round:
        return {}
    return {"split_stale_applied": float(counts[1]), "split_stale_dropped": float(counts[2])}
