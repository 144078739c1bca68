"""Dispatch: ask the policy whom to start, cut each client's share, send its download, run the wave.

The engine applies the aggregator's personalised download (``ServerState.client_views``) to every share
here, once, before the download is sent: split providers only cut the share. The download is booked in
the ledger when it is sent; the rest of a job's traffic when its result arrives (:mod:`fedcore.engine.arrivals`).
An update's ``base`` (the values the client started from) is attached here, on the server, from what the
server sent: it never travels through the worker.
"""
from __future__ import annotations

import copy
import functools
import heapq
from typing import TYPE_CHECKING, Any

import attrs
import torch

from fedcore.contexts import RoundContext
from fedcore.engine.arrivals import InFlight
from fedcore.engine.client_job import ClientJob, JobResult
from fedcore.engine.idle import IdleClients
from fedcore.errors import ConfigError, MissingSlotError
from fedcore.network import Channel, Transfer, send_entries
from fedcore.rng import derive_seed, numpy_generator
from fedcore.types import ClientInfo, Share, TensorDict

if TYPE_CHECKING:
    from fedcore.engine.loop import Engine


def apply_client_view(share: Share, view: TensorDict | None) -> None:
    """Load a personalised download into the share's module: the view's entries that the share downloads.

    Entries the share does not download (a client's personal segment, a frozen part it already holds)
    stay as the split built them: a view is a download and never crosses the network uncounted.
    """
    if not view:
        return
    wanted = set(share.download)
    share.module.load_state_dict({k: v for k, v in view.items() if k in wanted}, strict=False)


def build_job(engine: Engine, client: ClientInfo, ctx: RoundContext, *, private_state: bool = False
              ) -> tuple[ClientJob, Share, TensorDict]:
    """Cut the client's share, apply its view, send and book the download; returns ``(job, share, sent)``.

    ``private_state``: the job works on a copy of the client's state (a client that will drop out
    mid-round must not commit its local state). ``sent`` is the server's record of the download.
    """
    run = engine.run_ctx
    state = run.client_states[client.id]
    if private_state:
        state = copy.deepcopy(state)
    share = engine.hooks.fedcore_split_model(model=run.server.model, client=client, state=state, ctx=ctx)
    apply_client_view(share, run.server.client_views.get(client.id))
    channel = Channel(client.id, ctx.round)
    own = share.module.state_dict()
    missing = sorted(set(share.download) - set(own))
    if missing:
        raise MissingSlotError(f"share of client {client.id} downloads entries its module does not have: {missing[:8]}")
    sent = {k: own[k] for k in share.download}
    downloaded = send_entries(channel.down, sent, share.kinds)
    run.ledger.book(channel)  # the download happens now
    with torch.no_grad():
        for k, v in downloaded.items():
            own[k].copy_(v)
    assert run.partition is not None, "the engine partitions before it dispatches"
    pool_parts = run.partition.pool if run.partition.pool is not None else run.partition.train
    job = ClientJob(client=client, share=share, pool=pool_parts[client.id], state=state,
                    ctx=ctx.for_client(client.id, channel, remote=False), version=run.server.version,
                    placement=engine.placement)
    return job, share, downloaded


def dispatch(engine: Engine, ctx: RoundContext) -> None:
    """Ask the policy whom to start, apply seeded faults, run the wave and queue the arrivals.

    Called once per round, and after every arrival for ``continuous`` policies (FedBuff and
    FedAsync refill their concurrency at once). A client started again on the same global
    version gets fresh random streams (a seed derived from how often it was started), so it
    does not repeat its previous job; the first start keeps the plain ``(seed, round, client)``.
    """
    run = engine.run_ctx
    if engine._count_round != ctx.round:
        engine._count_round, engine._dispatch_calls, engine._starts = ctx.round, 0, {}
    calls = engine._dispatch_calls
    engine._dispatch_calls += 1
    clients = run.clients  # client ids are their positions (Engine.setup)
    busy = engine.busy_ids()
    idle = IdleClients(len(clients), busy)  # O(busy), not O(registered clients): see fedcore.engine.idle
    rng = numpy_generator(run.seed, "schedule", ctx.round, *((calls,) if calls else ()))
    chosen = list(engine.scheduler.dispatch(round=ctx.round, now=engine.now, idle=idle, busy=busy, rng=rng))
    unknown = sorted({c for c in chosen if c not in idle})
    if unknown:
        raise ConfigError(f"scheduler dispatched clients {unknown} that are not idle")
    contexts, plans = {}, {}
    for c in chosen:
        k = engine._starts.get(c, 0)
        engine._starts[c] = k + 1
        contexts[c] = ctx if k == 0 else attrs.evolve(ctx, seed=derive_seed(run.seed, "restart", k))
        plans[c] = fault_plan(engine, clients[c], ctx.round, contexts[c].seed)
    built = []
    for c in chosen:
        if plans[c].outcome == "unavailable":
            engine.events["unavailable"].append(c)  # offline at dispatch: nothing sent, nothing computed
            continue
        job, share, sent = build_job(engine, clients[c], contexts[c], private_state=plans[c].outcome == "dropout")
        if engine.clock is not None:
            engine.clock.admit(job.client, share)
        built.append((job, share, sent))
    jobs = [job for job, _, _ in built]
    clock = engine.clock
    ahead = [clock.duration_at_dispatch(job.client, share=share, round=ctx.round) if clock is not None else 0.0
             for job, share, _ in built]  # known before the job runs: no clock (zero) or a clock that prices jobs so
    submit = engine.submit
    lazy = submit is not None and all(d is not None for d in ahead)
    outcomes: list[Any] = submit(jobs) if lazy and submit is not None else engine.executor.run(jobs)
    for (job, share, sent), outcome, known in zip(built, outcomes, ahead):
        plan = plans[job.client.id]
        item = InFlight(arrival=engine.now, client_id=job.client.id, dispatched_at=engine.now, version=job.version,
                        outcome=plan.outcome, upload=tuple(share.upload))
        if lazy:  # the arrival does not depend on the result: collect it when it is needed (fedcore.engine.pending)
            engine.pending.add(job.client.id, outcome, functools.partial(complete, engine, item, plan, sent))
        else:
            complete(engine, item, plan, sent, outcome)
        if known is None:
            assert clock is not None
            known = clock.duration(job.client, outcome, share=share, round=ctx.round)
        item.arrival = engine.now + (known * plan.fraction if plan.outcome == "dropout" else known)
        heapq.heappush(engine.in_flight, (item.arrival, item.client_id, item))


def complete(engine: Engine, item: InFlight, plan: Any, sent: TensorDict, result: JobResult) -> None:
    """Apply a finished job: commit the client's state, attach the update's base, keep its unbooked traffic."""
    update = result.update
    pending: tuple[Transfer, ...] = ()
    if plan.outcome != "dropout":  # a client that drops out commits no local state and sends nothing
        engine.run_ctx.client_states[result.client_id] = result.state
        pending = result.channel.unbooked()
    if update is not None:  # the server attaches what it sent as the update's base
        update = attrs.evolve(update, base={k: sent[k] for k in update.tensors if k in sent})
    item.update, item.error = update, result.error
    item.rows = tuple(attrs.asdict(r) for r in pending)


def fault_plan(engine: Engine, client: ClientInfo, round: int, seed: int) -> Any:
    from fedcore.runtime.faults import FaultPlan

    if engine.faults is None:
        return FaultPlan()
    availability = float(engine.clock.availability(client)) if engine.clock is not None else 1.0
    return engine.faults.plan(seed=seed, round=round, client=client.id, availability=availability)
