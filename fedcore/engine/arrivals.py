"""Arrivals: jobs in flight, released in virtual-time order until the policy wants to aggregate.

Jobs run eagerly at dispatch on the global model they were given; their results wait here until their
virtual arrival, so asynchronous policies see stale updates exactly as a real system would. At arrival
the job's remaining traffic (per-batch exchanges and the upload, even a lost one) is booked in the ledger.
"""
from __future__ import annotations

import heapq
import logging
import math
from typing import TYPE_CHECKING, Any

import attrs

from fedcore.contexts import RoundContext
from fedcore.engine.stale import settle
from fedcore.engine.validate import update_problem
from fedcore.network import Transfer
from fedcore.types import ClientUpdate, DropUpdate

if TYPE_CHECKING:
    from fedcore.engine.loop import Engine

log = logging.getLogger("fedcore")


@attrs.define(kw_only=True, eq=False)
class InFlight:
    """A dispatched job the server has not heard back from yet.

    Jobs run eagerly at dispatch, so this holds the finished result until its virtual arrival.
    It is what a checkpoint of an asynchronous run must keep (see :meth:`Engine.runtime_state`):
    plain values and the update's tensors, no module. ``outcome`` is ``"ok"``, ``"lost"`` (the
    upload was sent but never reached the server) or ``"dropout"`` (the client vanished mid-round;
    ``arrival`` is when the server notices).
    """

    arrival: float
    client_id: int
    dispatched_at: float
    version: int
    outcome: str = "ok"
    update: ClientUpdate | None = None
    error: str | None = None
    upload: tuple[str, ...] = ()
    rows: tuple[dict[str, Any], ...] = ()  # the job's transfers not booked at dispatch, booked on arrival


FRUITLESS_PER_CLIENT = 5
"""A continuous policy's round gives up after this many times the registered clients' arrivals in a row with no
update (every client dropping out, or losing its upload, would otherwise refill forever); the round is then
reported failed. At a 70 % fault rate and 6 clients, a round with updates to come ends this way with probability
0.7^30, about 2e-5."""


def wait(engine: Engine, ctx: RoundContext) -> None:
    """Advance virtual time one arrival at a time until the policy wants to aggregate."""
    from fedcore.engine.dispatch import dispatch

    refill = False
    fruitless, limit = 0, FRUITLESS_PER_CLIENT * len(engine.run_ctx.clients)
    while True:
        decision = engine.scheduler.ready(now=engine.now, arrived=engine.arrived, busy=engine.busy_ids(),
                                          since=engine.since)
        if decision is True:
            return
        if refill:  # a continuous policy starts replacements on the current model at once
            dispatch(engine, ctx)
        next_arrival = engine.in_flight[0][0] if engine.in_flight else math.inf
        if decision is False:
            if not engine.in_flight:
                return  # nothing more can arrive: aggregate what there is
        elif next_arrival > float(decision):
            engine.now = max(engine.now, float(decision))
            return
        _, _, item = heapq.heappop(engine.in_flight)
        engine.now = max(engine.now, item.arrival)
        before = len(engine.arrived)
        arrive(engine, item, ctx)
        refill = engine.scheduler.continuous
        fruitless = fruitless + 1 if len(engine.arrived) == before else 0
        if refill and fruitless >= limit:
            log.warning("round %s: %s arrivals in a row brought no update; giving the round up", ctx.round, fruitless)
            return


def cancel_stragglers(engine: Engine) -> None:
    """Stop the in-flight jobs the policy gives up on (a synchronous deadline); they become idle.

    Their uploads never happen, so they are never booked in the ledger; their downloads are.
    """
    if not engine.in_flight:
        return
    stop = set(engine.scheduler.cancel(now=engine.now, busy=engine.busy_ids()))
    if not stop:
        return
    keep = []
    for entry in engine.in_flight:
        item = entry[2]
        if item.client_id in stop:
            engine.pending.collect(item.client_id)  # its state was committed at dispatch under the inline executor
            engine.busy_s[item.client_id] += max(0.0, engine.now - item.dispatched_at)
            engine.events["cancelled"].append(item.client_id)
        else:
            keep.append(entry)
    heapq.heapify(keep)
    engine.in_flight = keep


def arrive(engine: Engine, item: InFlight, ctx: RoundContext) -> None:
    run = engine.run_ctx
    cid = item.client_id
    engine.pending.collect(cid)  # a job submitted to a parallel executor: wait for it now, and only for it
    engine.busy_s[cid] += item.arrival - item.dispatched_at
    run.ledger.merge([Transfer(**r) for r in item.rows])  # the rest of the job's traffic (even a lost upload)
    if item.outcome in ("dropout", "lost"):  # the server never receives anything
        engine.events[item.outcome].append(cid)
        log.info("round %s: client %s %s", ctx.round, cid,
                 "dropped out mid-round" if item.outcome == "dropout" else "lost its upload")
        return
    client = run.clients[cid]  # ids are positions (Engine.setup): no scan of every registered client
    if item.error is not None:
        engine.events["failed"].append({"client": cid, "error": item.error.strip().splitlines()[-1]})
        log.warning("client %s failed in round %s; its work is dropped:\n%s", cid, ctx.round, item.error)
        return
    update = item.update
    assert update is not None
    problem = update_problem(update, upload=item.upload)
    if problem is None and update.version < run.server.version and not engine.scheduler.accepts(
            update, version=run.server.version):
        engine.events["dropped"].append(cid)
    elif problem is not None:
        engine.events["rejected"].append({"client": cid, "reason": problem})
        log.warning("round %s: rejected the update of client %s: %s", ctx.round, cid, problem)
    else:
        dated = attrs.evolve(update, staleness=run.server.version - update.version)
        settled = settle(engine.hooks, dated, run.server.model, ctx) if dated.staleness else dated
        if isinstance(settled, DropUpdate):
            engine.events["share_changed"].append({"client": cid, "reason": settled.reason})
            log.info("round %s: dropped the stale update of client %s: %s", ctx.round, cid, settled.reason)
        else:
            engine.arrival_times[len(engine.arrived)] = item.arrival - item.dispatched_at  # keyed by position: a
            engine.arrived.append(settled)  # client may repeat
    engine.hooks.fedcore_client_done(client=client, update=update, ctx=ctx)
