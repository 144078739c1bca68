"""The engine: owns the loop, the clock and the state; plugins only answer hook calls.

One pass of the loop is one *round* (one aggregation, one global version):

    round_start -> scheduler.dispatch -> per client: split_model + download -> executor runs
    select_data + local_update + upload -> arrivals in virtual-time order (client_done) ->
    scheduler.ready -> aggregate -> evaluate (every k rounds) -> collect_metrics -> round_end

Jobs run eagerly at dispatch on the global model they were given; their results are released at
their virtual arrival time, so asynchronous policies see stale updates exactly as a real system
would. Without a clock every job takes zero virtual time and a round is a synchronous round.
"""
from __future__ import annotations

import heapq
import logging
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Protocol

import attrs
import torch
from torch import nn

from fedcore.engine.client_job import ClientJob, JobResult
from fedcore.engine.context import RoundContext, RunContext
from fedcore.engine.executor import Executor, InlineExecutor
from fedcore.engine.history import History, RunResult
from fedcore.engine.network import Channel
from fedcore.engine.validate import update_problem
from fedcore.errors import ConfigError, MissingSlotError
from fedcore.rng import numpy_generator
from fedcore.types import AggregateResult, ClientInfo, ClientState, ClientUpdate, Partition, ServerState, Share

if TYPE_CHECKING:
    from fedcore.pipeline import Pipeline

log = logging.getLogger("fedcore")


class Clock(Protocol):
    """Turns a finished job into virtual seconds on its client's device (see the runtime issue)."""

    def duration(self, client: ClientInfo, result: JobResult) -> float: ...


def check_partition(partition: Partition, num_clients: int, train_size: int) -> None:
    if partition.num_clients != num_clients:
        raise ConfigError(f"the partition has {partition.num_clients} clients; num_clients={num_clients}")
    for c, part in enumerate(partition.train):
        if not part:
            raise ConfigError(f"the partition leaves client {c} with no training samples; use fewer clients "
                              f"(num_clients={num_clients}) or a partitioner with a minimum size")
        bad = [i for i in part if not 0 <= i < train_size]
        if bad:
            raise ConfigError(f"client {c} has sample indices outside the training set of {train_size}: {bad[:5]}")


def load_entries(model: nn.Module, state: dict[str, torch.Tensor]) -> None:
    """Copy ``state`` into ``model``'s entries in place; unknown names and shape changes are errors."""
    own = model.state_dict()
    unknown = sorted(set(state) - set(own))
    if unknown:
        raise KeyError(f"the aggregate names entries the global model does not have: {unknown[:8]}")
    with torch.no_grad():
        for k, v in state.items():
            if own[k].shape != v.shape:
                raise ValueError(f"aggregate entry {k!r} has shape {tuple(v.shape)}, the global model has {tuple(own[k].shape)}")
            own[k].copy_(v)


class Engine:
    """Runs one pipeline on one model and dataset. Use :meth:`fedcore.Pipeline.run` rather than this directly."""

    def __init__(self, pipeline: Pipeline, *, model: nn.Module, train: Any, test: Any, num_clients: int, rounds: int,
                 seed: int, eval_every: int = 1, executor: Executor | None = None, clock: Clock | None = None,
                 profiles: Sequence[str | None] | None = None, out_dir: Any = None,
                 on_round: Callable[[dict[str, Any]], None] | None = None) -> None:
        if num_clients < 1:
            raise ConfigError(f"num_clients={num_clients}; must be >= 1")
        if rounds < 0:
            raise ConfigError(f"rounds={rounds}; must be >= 0")
        if eval_every < 1:
            raise ConfigError(f"eval_every={eval_every}; must be >= 1")
        if len(train) < num_clients:
            raise ConfigError(f"num_clients={num_clients} is more than the {len(train)} training samples")
        if profiles is not None and len(profiles) != num_clients:
            raise ConfigError(f"profiles has {len(profiles)} entries for num_clients={num_clients}")
        self.pipeline = pipeline
        self.hooks = pipeline.hooks
        self.executor = executor or InlineExecutor()
        self.clock = clock
        self.eval_every = eval_every
        self.profiles = profiles
        self.on_round = on_round
        self.run_ctx = RunContext(seed=seed, num_clients=num_clients, rounds=rounds, train=train, test=test,
                                  server=ServerState(model=model), out_dir=out_dir)
        self.history = History()

    # -- set-up ------------------------------------------------------------------------------

    def setup(self) -> None:
        run = self.run_ctx
        partition = self.hooks.fedcore_partition(dataset=run.train, num_clients=run.num_clients,
                                                 test_dataset=run.test, run=run)
        check_partition(partition, run.num_clients, len(run.train))
        run.partition = partition
        run.clients = tuple(
            ClientInfo(id=c, num_samples=len(idx), profile=None if self.profiles is None else self.profiles[c])
            for c, idx in enumerate(partition.train)
        )
        run.client_states = {c.id: ClientState(client_id=c.id) for c in run.clients}
        self.scheduler = self.hooks.fedcore_make_scheduler(clients=run.clients, run=run)

    # -- one client --------------------------------------------------------------------------

    def _job(self, client: ClientInfo, ctx: RoundContext) -> tuple[ClientJob, Share]:
        run = self.run_ctx
        state = run.client_states[client.id]
        share = self.hooks.fedcore_split_model(model=run.server.model, client=client, state=state, ctx=ctx)
        channel = Channel(client.id, ctx.round)
        own = share.module.state_dict()
        missing = sorted(set(share.download) - set(own))
        if missing:
            raise MissingSlotError(f"share of client {client.id} downloads entries its module does not have: {missing[:8]}")
        downloaded = channel.down("weights", {k: own[k] for k in share.download})
        with torch.no_grad():
            for k, v in downloaded.items():
                own[k].copy_(v)
        pool_parts = run.partition.pool if run.partition.pool is not None else run.partition.train
        job = ClientJob(client=client, share=share, downloaded=downloaded, pool=pool_parts[client.id], state=state,
                        ctx=ctx.for_client(client.id, channel, remote=False), version=run.server.version)
        return job, share

    # -- the loop ----------------------------------------------------------------------------

    def run(self) -> RunResult:
        run = self.run_ctx
        self.setup()
        self.executor.start(self.pipeline, run.train)
        self.hooks.fedcore_run_start(run=run)
        clients = {c.id: c for c in run.clients}
        now, since = 0.0, 0.0
        in_flight: list[tuple[float, int, JobResult, Share]] = []
        arrived: list[ClientUpdate] = []
        events: dict[str, list[Any]] = {"failed": [], "rejected": [], "dropped": []}
        ledger_mark = 0
        start_wall = time.perf_counter()
        try:
            while run.server.version < run.rounds:
                round_wall = time.perf_counter()
                ctx = RoundContext(round=run.server.version, seed=run.seed, run=run)
                self.hooks.fedcore_round_start(ctx=ctx)
                busy = sorted(c for _, c, _, _ in in_flight)
                idle = [c for c in clients if c not in busy]
                chosen = list(self.scheduler.dispatch(round=ctx.round, now=now, idle=idle, busy=busy,
                                                      rng=numpy_generator(run.seed, "schedule", ctx.round)))
                unknown = sorted(set(chosen) - set(idle))
                if unknown:
                    raise ConfigError(f"scheduler dispatched clients {unknown} that are not idle")
                built = [self._job(clients[c], ctx) for c in chosen]
                results = self.executor.run([job for job, _ in built])
                for (job, share), result in zip(built, results):
                    run.client_states[result.client_id] = result.state
                    run.ledger.merge(result.rows)
                    arrival = now + (self.clock.duration(job.client, result) if self.clock else 0.0)
                    heapq.heappush(in_flight, (arrival, result.client_id, result, share))

                # wait until the policy wants to aggregate
                while True:
                    decision = self.scheduler.ready(now=now, arrived=arrived, busy=[c for _, c, _, _ in in_flight],
                                                    since=since)
                    if decision is True:
                        break
                    next_arrival = in_flight[0][0] if in_flight else float("inf")
                    if decision is False:
                        if not in_flight:
                            break  # nothing more can arrive: aggregate what there is
                        now = max(now, next_arrival)
                    elif next_arrival <= float(decision):
                        now = max(now, next_arrival)
                    else:
                        now = max(now, float(decision))
                        break
                    while in_flight and in_flight[0][0] <= now:
                        _, _, result, share = heapq.heappop(in_flight)
                        self._arrive(result, share, ctx, arrived, events)

                record = self._aggregate(ctx, arrived, events, now, round_wall, start_wall, ledger_mark)
                ledger_mark = len(run.ledger.rows)
                arrived, since = [], now
                events = {"failed": [], "rejected": [], "dropped": []}
                self.history.rows.append(record)
                self.hooks.fedcore_round_end(ctx=ctx, record=record)
                if self.on_round is not None:
                    self.on_round(record)
            self.hooks.fedcore_run_end(run=run, history=self.history.rows)
        finally:
            self.executor.close()
        return RunResult(history=self.history, model=run.server.model, ledger=run.ledger, run=run)

    def _arrive(self, result: JobResult, share: Share, ctx: RoundContext, arrived: list[ClientUpdate],
                events: dict[str, list[Any]]) -> None:
        run = self.run_ctx
        client = next(c for c in run.clients if c.id == result.client_id)
        if result.error is not None:
            events["failed"].append({"client": result.client_id, "error": result.error.strip().splitlines()[-1]})
            log.warning("client %s failed in round %s; its work is dropped:\n%s", result.client_id, ctx.round, result.error)
            return
        update = result.update
        assert update is not None
        problem = update_problem(update, share)
        if problem is None and update.version < run.server.version and not self.scheduler.accepts(
                update, version=run.server.version):
            events["dropped"].append(result.client_id)
        elif problem is not None:
            events["rejected"].append({"client": result.client_id, "reason": problem})
            log.warning("round %s: rejected the update of client %s: %s", ctx.round, result.client_id, problem)
        else:
            arrived.append(attrs.evolve(update, staleness=run.server.version - update.version))
        self.hooks.fedcore_client_done(client=client, update=update, ctx=ctx)

    def _aggregate(self, ctx: RoundContext, arrived: list[ClientUpdate], events: dict[str, list[Any]], now: float,
                   round_wall: float, start_wall: float, ledger_mark: int) -> dict[str, Any]:
        run = self.run_ctx
        server = run.server
        agg_metrics: dict[str, float] = {}
        if arrived:
            arrived.sort(key=lambda u: u.client_id)
            result: AggregateResult = self.hooks.fedcore_aggregate(model=server.model, updates=arrived, ctx=ctx)
            load_entries(server.model, result.state)
            for cid, view in result.per_client.items():
                server.client_views[int(cid)] = view
            agg_metrics = dict(result.metrics)
        server.version += 1
        record: dict[str, Any] = {"round": ctx.round, "clients": [u.client_id for u in arrived]}
        total = sum(u.num_examples for u in arrived)
        losses = [(u.metrics["loss"], u.num_examples) for u in arrived if "loss" in u.metrics]
        if losses:
            record["train_loss"] = float(sum(l * n for l, n in losses) / sum(n for _, n in losses))
        record["num_examples"] = total
        if any(u.staleness for u in arrived):
            record["max_staleness"] = max(u.staleness for u in arrived)
        for key, items in events.items():
            if items:
                record[key] = items
        new_rows = run.ledger.rows[ledger_mark:]
        record["bytes_up"] = sum(r.nbytes for r in new_rows if r.direction == "up")
        record["bytes_down"] = sum(r.nbytes for r in new_rows if r.direction == "down")
        record["bytes_up_total"] = run.ledger.total(direction="up")
        record["bytes_down_total"] = run.ledger.total(direction="down")
        record.update({f"agg_{k}": float(v) for k, v in agg_metrics.items()})
        if server.version % self.eval_every == 0 or server.version == run.rounds:
            metrics = self.hooks.fedcore_evaluate(model=server.model, dataset=run.test, clients=run.clients,
                                                  states=run.client_states, ctx=ctx)
            record.update({k: float(v) for k, v in metrics.items()})
        record.update(self.hooks.collect_metrics(ctx=ctx))
        if self.clock is not None:
            record["virtual_time"] = now
        record["round_wall_s"] = time.perf_counter() - round_wall
        record["wall_s"] = time.perf_counter() - start_wall
        return record
