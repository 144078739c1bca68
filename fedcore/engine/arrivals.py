"""Arrivals: jobs in flight, released in virtual-time order until the policy wants to aggregate.

Jobs run eagerly at dispatch on the global model they were given; their results wait here until their
virtual arrival, so asynchronous policies see stale updates exactly as a real system would. At arrival
the job's remaining traffic (per-batch exchanges and the upload, even a lost one) is booked in the ledger.
"""
from __future__ import annotations

from collections.abc import Callable
import logging
import math
from typing import Any

import attrs

from fedcore.contexts import RoundContext
from fedcore.engine.stale import settle
from fedcore.engine.state import EngineParts, EngineState, InFlight
from fedcore.engine.validate import update_problem
from fedcore.network import Transfer
from fedcore.types import DropUpdate

log = logging.getLogger("fedcore")

__all__ = ["FRUITLESS_PER_CLIENT", "InFlight", "arrive", "cancel_stragglers", "wait"]

FRUITLESS_PER_CLIENT = 5
"""A continuous policy's round gives up after this many times the registered clients' arrivals in a row with no
update (every client dropping out, or losing its upload, would otherwise refill forever); the round is then
reported failed. At a 70 % fault rate and 6 clients, a round with updates to come ends this way with probability
0.7^30, about 2e-5."""


def wait(parts: EngineParts, state: EngineState, ctx: RoundContext, refill: Callable[[], Any]) -> int:
    """Advance virtual time one arrival at a time until the policy wants to aggregate; returns the arrivals taken.

    ``refill`` starts replacements on the current model (the loop's dispatch); a ``continuous`` policy
    calls for it after every arrival.
    """
    scheduler = parts.scheduler
    continuous = False
    taken = fruitless = 0
    limit = FRUITLESS_PER_CLIENT * len(parts.run.clients)
    while True:
        decision = scheduler.ready(now=state.now, arrived=state.arrived, busy=state.busy_ids(), since=state.since)
        if decision is True:
            return taken
        if continuous:  # a continuous policy starts replacements on the current model at once
            refill()
        next_arrival = state.next_arrival()
        if decision is False:
            if next_arrival is None:
                return taken  # nothing more can arrive: aggregate what there is
        elif (math.inf if next_arrival is None else next_arrival) > float(decision):
            state.advance(float(decision))
            return taken
        item = state.pop_arrival()
        before = len(state.arrived)
        arrive(parts, state, item, ctx)
        taken += 1
        continuous = scheduler.continuous
        fruitless = fruitless + 1 if len(state.arrived) == before else 0
        if continuous and fruitless >= limit:
            log.warning("round %s: %s arrivals in a row brought no update; giving the round up", ctx.round, fruitless)
            return taken


def cancel_stragglers(parts: EngineParts, state: EngineState) -> list[int]:
    """Stop the in-flight jobs the policy gives up on (a synchronous deadline); they become idle. Returns them.

    Their uploads never happen, so they are never booked in the ledger; their downloads are.
    """
    if not state.in_flight:
        return []
    stop = set(parts.scheduler.cancel(now=state.now, busy=state.busy_ids()))
    return state.cancel(stop) if stop else []


def arrive(parts: EngineParts, state: EngineState, item: InFlight, ctx: RoundContext) -> str:
    """Receive one popped job at its arrival: book its traffic, validate and settle its update.

    Returns what became of it: ``"arrived"`` (waiting for aggregation) or an event key.
    """
    run = parts.run
    cid = item.client_id
    run.ledger.merge([Transfer(**r) for r in item.rows])  # the rest of the job's traffic (even a lost upload)
    if item.outcome in ("dropout", "lost"):  # the server never receives anything
        state.note(item.outcome, cid)
        log.info("round %s: client %s %s", ctx.round, cid,
                 "dropped out mid-round" if item.outcome == "dropout" else "lost its upload")
        return item.outcome
    client = run.clients[cid]  # ids are positions (Engine.setup): no scan of every registered client
    if item.error is not None:
        state.note("failed", {"client": cid, "error": item.error.strip().splitlines()[-1]})
        log.warning("client %s failed in round %s; its work is dropped:\n%s", cid, ctx.round, item.error)
        return "failed"
    update = item.update
    assert update is not None
    problem = update_problem(update, upload=item.upload)
    if problem is None and update.version < run.server.version and not parts.scheduler.accepts(
            update, version=run.server.version):
        state.note("dropped", cid)
        became = "dropped"
    elif problem is not None:
        state.note("rejected", {"client": cid, "reason": problem})
        log.warning("round %s: rejected the update of client %s: %s", ctx.round, cid, problem)
        became = "rejected"
    else:
        dated = attrs.evolve(update, staleness=run.server.version - update.version)
        settled = settle(parts.hooks, dated, run.server.model, ctx) if dated.staleness else dated
        if isinstance(settled, DropUpdate):
            state.note("share_changed", {"client": cid, "reason": settled.reason})
            log.info("round %s: dropped the stale update of client %s: %s", ctx.round, cid, settled.reason)
            became = "share_changed"
        else:
            state.arrive(settled, item.arrival - item.dispatched_at)
            became = "arrived"
    parts.hooks.fedcore_client_done(client=client, update=update, ctx=ctx)
    return became
