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
from typing import Any

import attrs
import torch

from fedcore.contexts import RoundContext
from fedcore.engine.idle import IdleClients
from fedcore.engine.state import EngineParts, EngineState, InFlight
from fedcore.errors import ConfigError, MissingSlotError
from fedcore.jobs import ClientJob, JobResult
from fedcore.network import Channel, Transfer, send_entries
from fedcore.rng import derive_seed, numpy_generator
from fedcore.types import ClientInfo, ServerTensors, Share, TensorDict


def apply_client_view(share: Share, view: TensorDict | None) -> None:
    """Load a personalised download into the share's module: the view's entries that the share downloads.

    Entries the share does not download (a client's personal segment, a frozen part it already holds)
    stay as the split built them: a view is a download and never crosses the network uncounted.
    """
    if not view:
        return
    wanted = set(share.download)
    share.module.load_state_dict({k: v for k, v in view.items() if k in wanted}, strict=False)


def with_server_state(share: Share, aux: ServerTensors, down: TensorDict, channel: Channel) -> Share:
    """The share with ``down`` (the server-state channel's download for this client, sent and booked under each
    tensor's own kind) as ``share.aux``, and the kinds its auxiliary uploads cross under. The share itself when the
    method keeps no server state."""
    if not aux:
        return share
    kinds = {name: aux.kind_of(name) for name in aux.kinds}
    received = send_entries(channel.down, down, {n: aux.kind_of(n) for n in down}) if down else {}
    return attrs.evolve(share, aux=received, kinds={**kinds, **share.kinds})


def build_job(parts: EngineParts, client: ClientInfo, ctx: RoundContext, *, private_state: bool = False
              ) -> tuple[ClientJob, Share, TensorDict]:
    """Cut the client's share, apply its view, send and book the download; returns ``(job, share, sent)``.

    ``private_state``: the job works on a copy of the client's state (a client that will drop out
    mid-round must not commit its local state). ``sent`` is the server's record of the download.
    """
    run = parts.run
    state = run.client_states[client.id]
    if private_state:
        state = copy.deepcopy(state)
    share = parts.hooks.fedcore_split_model(model=run.server.model, client=client, state=state, ctx=ctx)
    apply_client_view(share, run.server.client_views.get(client.id))
    channel = Channel(client.id, ctx.round)
    own = share.module.state_dict()
    missing = sorted(set(share.download) - set(own))
    if missing:
        raise MissingSlotError(f"share of client {client.id} downloads entries its module does not have: {missing[:8]}")
    sent = {k: own[k] for k in share.download}
    aux_down = run.server.aux.download_for(client.id) if run.server.aux else {}
    # a share that downloads nothing still costs a (empty) message, unless server state comes down with it
    downloaded = send_entries(channel.down, sent, share.kinds) if sent or not aux_down else {}
    share = with_server_state(share, run.server.aux, aux_down, channel)
    run.ledger.book(channel)  # the download happens now
    with torch.no_grad():
        for k, v in downloaded.items():
            own[k].copy_(v)
    assert run.partition is not None, "the engine partitions before it dispatches"
    pool_parts = run.partition.pool if run.partition.pool is not None else run.partition.train
    job = ClientJob(client=client, share=share, pool=pool_parts[client.id], state=state,
                    ctx=ctx.for_client(client.id, channel, remote=False), version=run.server.version,
                    placement=parts.placement)
    return job, share, downloaded


def dispatch(parts: EngineParts, state: EngineState, ctx: RoundContext) -> list[int]:
    """Ask the policy whom to start, apply seeded faults, run the wave and admit the jobs; returns whom it started.

    Called once per round, and after every arrival for ``continuous`` policies (FedBuff and
    FedAsync refill their concurrency at once). A client started again on the same global
    version gets fresh random streams (a seed derived from how often it was started), so it
    does not repeat its previous job; the first start keeps the plain ``(seed, round, client)``.
    """
    run = parts.run
    calls = state.next_wave(ctx.round)
    clients = run.clients  # client ids are their positions (Engine.setup)
    busy = state.busy_ids()
    idle = IdleClients(len(clients), busy)  # O(busy), not O(registered clients): see fedcore.engine.idle
    rng = numpy_generator(run.seed, "schedule", ctx.round, *((calls,) if calls else ()))
    chosen = list(parts.scheduler.dispatch(round=ctx.round, now=state.now, idle=idle, busy=busy, rng=rng))
    unknown = sorted({c for c in chosen if c not in idle})
    if unknown:
        raise ConfigError(f"scheduler dispatched clients {unknown} that are not idle")
    contexts, plans = {}, {}
    for c in chosen:
        k = state.start(c)
        contexts[c] = ctx if k == 0 else attrs.evolve(ctx, seed=derive_seed(run.seed, "restart", k))
        plans[c] = fault_plan(parts, clients[c], ctx.round, contexts[c].seed)
    built = []
    for c in chosen:
        if plans[c].outcome == "unavailable":
            state.note("unavailable", c)  # offline at dispatch: nothing sent, nothing computed
            continue
        job, share, sent = build_job(parts, clients[c], contexts[c], private_state=plans[c].outcome == "dropout")
        if parts.clock is not None:
            parts.clock.admit(job.client, share)
        built.append((job, share, sent))
    jobs = [job for job, _, _ in built]
    clock = parts.clock
    ahead = [clock.duration_at_dispatch(job.client, share=share, round=ctx.round) if clock is not None else 0.0
             for job, share, _ in built]  # known before the job runs: no clock (zero) or a clock that prices jobs so
    submit = parts.submit
    lazy = submit is not None and all(d is not None for d in ahead)
    outcomes: list[Any] = submit(jobs) if lazy and submit is not None else parts.executor.run(jobs)
    for (job, share, sent), outcome, known in zip(built, outcomes, ahead):
        plan = plans[job.client.id]
        if known is None:
            assert clock is not None
            known = clock.duration(job.client, outcome, share=share, round=ctx.round)
        seconds = known * plan.fraction if plan.outcome == "dropout" else known
        item = InFlight(arrival=state.now + seconds, client_id=job.client.id, dispatched_at=state.now,
                        version=job.version, outcome=plan.outcome, upload=tuple(share.upload))
        finish = functools.partial(complete, run.client_states, item, plan.outcome, sent)
        if lazy:  # the arrival does not depend on the result: collect it when it is needed (fedcore.engine.pending)
            state.pending.add(job.client.id, outcome, finish)
        else:
            finish(outcome)
        state.admit(item)
    return [job.client.id for job in jobs]


def complete(client_states: dict[int, Any], item: InFlight, outcome: str, sent: TensorDict,
             result: JobResult) -> None:
    """Apply a finished job: commit the client's state, attach the update's base, keep its unbooked traffic."""
    update = result.update
    pending: tuple[Transfer, ...] = ()
    if outcome != "dropout":  # a client that drops out commits no local state and sends nothing
        client_states[result.client_id] = result.state
        pending = result.channel.unbooked()
    if update is not None:  # the server attaches what it sent as the update's base
        update = attrs.evolve(update, base={k: sent[k] for k in update.tensors if k in sent})
    item.finish(update, result.error, tuple(attrs.asdict(r) for r in pending))


def fault_plan(parts: EngineParts, client: ClientInfo, round: int, seed: int) -> Any:
    from fedcore.runtime.faults import FaultPlan

    if parts.faults is None:
        return FaultPlan()
    availability = float(parts.clock.availability(client)) if parts.clock is not None else 1.0
    return parts.faults.plan(seed=seed, round=round, client=client.id, availability=availability)
