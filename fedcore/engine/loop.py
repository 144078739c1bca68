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

import copy
import heapq
import logging
import math
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
from fedcore.engine.network import Channel, Transfer, send_entries
from fedcore.engine.validate import update_problem
from fedcore.errors import ConfigError, MissingSlotError
from fedcore.rng import derive_seed, numpy_generator
from fedcore.types import AggregateResult, ClientInfo, ClientState, ClientUpdate, Partition, ServerState, Share

if TYPE_CHECKING:
    from fedcore.pipeline import Pipeline

log = logging.getLogger("fedcore")


class Clock(Protocol):
    """Turns a finished job into virtual seconds on its client's device (``fedcore.runtime.SimClock``).

    ``share`` is the server-side record of what the client was sent (its module is the downloaded,
    untrained copy under a remote executor); ``round`` is the global version the job started from.
    Optional methods the engine uses when present: ``bind(run, pipeline)`` once after set-up,
    ``admit(client, share)`` before a job runs (raise to refuse a share that does not fit), and
    ``availability(client) -> float`` for seeded faults.
    """

    def duration(self, client: ClientInfo, result: JobResult, *, share: Share, round: int) -> float: ...


EVENT_KEYS = ("failed", "rejected", "dropped", "cancelled", "unavailable", "dropout", "lost")
"""History-row keys for what happened to clients in a round (present only when non-empty)."""


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
    rows: tuple[dict[str, Any], ...] = ()  # the job's transfers after its download, booked on arrival


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
                 profiles: Sequence[str | None] | Any | None = None, out_dir: Any = None,
                 on_round: Callable[[dict[str, Any]], None] | None = None, faults: Any = None,
                 checkpoint: Any = None) -> None:
        if num_clients < 1:
            raise ConfigError(f"num_clients={num_clients}; must be >= 1")
        if rounds < 0:
            raise ConfigError(f"rounds={rounds}; must be >= 0")
        if eval_every < 1:
            raise ConfigError(f"eval_every={eval_every}; must be >= 1")
        if len(train) < num_clients:
            raise ConfigError(f"num_clients={num_clients} is more than the {len(train)} training samples")
        if profiles is not None and hasattr(profiles, "assign"):  # a seeded rule (fedcore.runtime.ProfileAssignment)
            profiles = list(profiles.assign(num_clients, seed=seed))
        if profiles is not None and len(profiles) != num_clients:
            raise ConfigError(f"profiles has {len(profiles)} entries for num_clients={num_clients}")
        self.pipeline = pipeline
        self.hooks = pipeline.hooks
        self.executor = executor or InlineExecutor()
        self.clock = clock
        self.faults = faults
        self.eval_every = eval_every
        self.profiles = profiles
        self.on_round = on_round
        self.checkpoint = checkpoint  # a fedcore.engine.checkpoint.Checkpointer: saves rounds, resumes a run
        self.run_ctx = RunContext(seed=seed, num_clients=num_clients, rounds=rounds, train=train, test=test,
                                  server=ServerState(model=model), out_dir=out_dir)
        self.history = History()
        # the run's runtime state between aggregations (what runtime_state() snapshots)
        self.now = 0.0
        self.since = 0.0
        self.in_flight: list[tuple[float, int, InFlight]] = []
        self.arrived: list[ClientUpdate] = []
        self.arrival_times: dict[int, float] = {}
        self.events: dict[str, list[Any]] = {k: [] for k in EVENT_KEYS}
        self.busy_s: dict[int, float] = {c: 0.0 for c in range(num_clients)}
        self._count_round, self._dispatch_calls, self._starts = -1, 0, {}  # starts per client on one version
        self.ledger_mark = 0

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
        if self.clock is not None and hasattr(self.clock, "bind"):
            self.clock.bind(run, self.pipeline)

    # -- one client --------------------------------------------------------------------------

    def _job(self, client: ClientInfo, ctx: RoundContext, *, private_state: bool = False) -> tuple[ClientJob, Share]:
        """Build the client's share, send the download, and package the job.

        ``private_state``: the job works on a copy of the client's state (a client that will drop
        out mid-round must not commit its local state).
        """
        run = self.run_ctx
        state = run.client_states[client.id]
        if private_state:
            state = copy.deepcopy(state)
        share = self.hooks.fedcore_split_model(model=run.server.model, client=client, state=state, ctx=ctx)
        channel = Channel(client.id, ctx.round)
        own = share.module.state_dict()
        missing = sorted(set(share.download) - set(own))
        if missing:
            raise MissingSlotError(f"share of client {client.id} downloads entries its module does not have: {missing[:8]}")
        downloaded = send_entries(channel.down, {k: own[k] for k in share.download}, share.kinds)
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
        resumed = self.checkpoint.restore(self) if self.checkpoint is not None else None
        start_wall = time.perf_counter() - (resumed.wall_s if resumed is not None else 0.0)
        try:
            while run.server.version < run.rounds:
                round_wall = time.perf_counter()
                ctx = RoundContext(round=run.server.version, seed=run.seed, run=run)
                self.hooks.fedcore_round_start(ctx=ctx)
                if self.checkpoint is not None:
                    self.checkpoint.round_started(self)
                self._dispatch(ctx)
                self._wait(ctx)
                self._cancel_stragglers()
                record = self._aggregate(ctx, self.arrived, self.events, self.now, round_wall, start_wall,
                                         self.ledger_mark)
                self.ledger_mark = len(run.ledger.rows)
                self.arrived, self.since, self.arrival_times = [], self.now, {}
                self.events = {k: [] for k in EVENT_KEYS}
                self.history.rows.append(record)
                self.hooks.fedcore_round_end(ctx=ctx, record=record)
                if self.on_round is not None:
                    self.on_round(record)
                if self.checkpoint is not None:
                    self.checkpoint.after_round(self, wall_s=record["wall_s"])
            self.hooks.fedcore_run_end(run=run, history=self.history.rows)
        finally:
            self.executor.close()
        return RunResult(history=self.history, model=run.server.model, ledger=run.ledger, run=run)

    def _busy_ids(self) -> list[int]:
        return sorted(c for _, c, _ in self.in_flight)

    def _dispatch(self, ctx: RoundContext) -> None:
        """Ask the policy whom to start, apply seeded faults, run the jobs and queue their arrivals.

        Called once per round, and after every arrival for ``continuous`` policies (FedBuff and
        FedAsync refill their concurrency at once). A client started again on the same global
        version gets fresh random streams (a seed derived from how often it was started), so it
        does not repeat its previous job; the first start keeps the plain ``(seed, round, client)``.
        """
        run = self.run_ctx
        if self._count_round != ctx.round:
            self._count_round, self._dispatch_calls, self._starts = ctx.round, 0, {}
        calls = self._dispatch_calls
        self._dispatch_calls += 1
        clients = {c.id: c for c in run.clients}
        busy = self._busy_ids()
        idle = [c for c in clients if c not in busy]
        rng = numpy_generator(run.seed, "schedule", ctx.round, *((calls,) if calls else ()))
        chosen = list(self.scheduler.dispatch(round=ctx.round, now=self.now, idle=idle, busy=busy, rng=rng))
        unknown = sorted(set(chosen) - set(idle))
        if unknown:
            raise ConfigError(f"scheduler dispatched clients {unknown} that are not idle")
        contexts, plans = {}, {}
        for c in chosen:
            k = self._starts.get(c, 0)
            self._starts[c] = k + 1
            contexts[c] = ctx if k == 0 else attrs.evolve(ctx, seed=derive_seed(run.seed, "restart", k))
            plans[c] = self._fault_plan(clients[c], ctx.round, contexts[c].seed)
        built = []
        for c in chosen:
            if plans[c].outcome == "unavailable":
                self.events["unavailable"].append(c)  # offline at dispatch: nothing sent, nothing computed
                continue
            job, share = self._job(clients[c], contexts[c], private_state=plans[c].outcome == "dropout")
            if self.clock is not None and hasattr(self.clock, "admit"):
                self.clock.admit(job.client, share)
            built.append((job, share, len(job.ctx.channel.rows) if job.ctx.channel is not None else 0))
        results = self.executor.run([job for job, _, _ in built])
        for (job, share, sent_before), result in zip(built, results):
            plan = plans[result.client_id]
            run.ledger.merge(result.rows[:sent_before])  # the download happened now
            later: tuple[dict[str, Any], ...] = ()
            if plan.outcome != "dropout":  # a client that drops out commits no local state and sends nothing
                run.client_states[result.client_id] = result.state
                later = tuple(attrs.asdict(r) for r in result.rows[sent_before:])
            duration = self.clock.duration(job.client, result, share=share, round=ctx.round) if self.clock else 0.0
            if plan.outcome == "dropout":
                duration *= plan.fraction
            item = InFlight(arrival=self.now + duration, client_id=result.client_id, dispatched_at=self.now,
                            version=job.version, outcome=plan.outcome, update=result.update, error=result.error,
                            upload=tuple(share.upload), rows=later)
            heapq.heappush(self.in_flight, (item.arrival, item.client_id, item))

    def _fault_plan(self, client: ClientInfo, round: int, seed: int) -> Any:
        from fedcore.runtime.faults import FaultPlan

        if self.faults is None:
            return FaultPlan()
        availability = 1.0
        if self.clock is not None and hasattr(self.clock, "availability"):
            availability = float(self.clock.availability(client))
        return self.faults.plan(seed=seed, round=round, client=client.id, availability=availability)

    def _wait(self, ctx: RoundContext) -> None:
        """Advance virtual time one arrival at a time until the policy wants to aggregate."""
        refill = False
        while True:
            decision = self.scheduler.ready(now=self.now, arrived=self.arrived, busy=self._busy_ids(),
                                            since=self.since)
            if decision is True:
                return
            if refill:  # a continuous policy starts replacements on the current model at once
                self._dispatch(ctx)
            next_arrival = self.in_flight[0][0] if self.in_flight else math.inf
            if decision is False:
                if not self.in_flight:
                    return  # nothing more can arrive: aggregate what there is
            elif next_arrival > float(decision):
                self.now = max(self.now, float(decision))
                return
            _, _, item = heapq.heappop(self.in_flight)
            self.now = max(self.now, item.arrival)
            self._arrive(item, ctx)
            refill = bool(getattr(self.scheduler, "continuous", False))

    def _cancel_stragglers(self) -> None:
        """Stop the in-flight jobs the policy gives up on (a synchronous deadline); they become idle.

        Their uploads never happen, so they are never booked in the ledger; their downloads are.
        """
        cancel = getattr(self.scheduler, "cancel", None)
        if cancel is None or not self.in_flight:
            return
        stop = set(cancel(now=self.now, busy=self._busy_ids()))
        if not stop:
            return
        keep = []
        for entry in self.in_flight:
            item = entry[2]
            if item.client_id in stop:
                self.busy_s[item.client_id] += max(0.0, self.now - item.dispatched_at)
                self.events["cancelled"].append(item.client_id)
            else:
                keep.append(entry)
        heapq.heapify(keep)
        self.in_flight = keep

    def _arrive(self, item: InFlight, ctx: RoundContext) -> None:
        run = self.run_ctx
        cid = item.client_id
        self.busy_s[cid] += item.arrival - item.dispatched_at
        run.ledger.merge([Transfer(**r) for r in item.rows])  # the upload (even a lost one) was sent
        if item.outcome in ("dropout", "lost"):  # the server never receives anything
            self.events[item.outcome].append(cid)
            log.info("round %s: client %s %s", ctx.round, cid,
                     "dropped out mid-round" if item.outcome == "dropout" else "lost its upload")
            return
        client = next(c for c in run.clients if c.id == cid)
        if item.error is not None:
            self.events["failed"].append({"client": cid, "error": item.error.strip().splitlines()[-1]})
            log.warning("client %s failed in round %s; its work is dropped:\n%s", cid, ctx.round, item.error)
            return
        update = item.update
        assert update is not None
        problem = update_problem(update, upload=item.upload)
        if problem is None and update.version < run.server.version and not self.scheduler.accepts(
                update, version=run.server.version):
            self.events["dropped"].append(cid)
        elif problem is not None:
            self.events["rejected"].append({"client": cid, "reason": problem})
            log.warning("round %s: rejected the update of client %s: %s", ctx.round, cid, problem)
        else:
            self.arrival_times[len(self.arrived)] = item.arrival - item.dispatched_at  # keyed by position: a
            self.arrived.append(attrs.evolve(update, staleness=run.server.version - update.version))  # client may repeat
        self.hooks.fedcore_client_done(client=client, update=update, ctx=ctx)

    def _runtime_metrics(self) -> dict[str, Any]:
        """Virtual time, Co-S2P's resource utilisation (Eq. 17) of this aggregation, and busy fractions."""
        out: dict[str, Any] = {"virtual_time": self.now}
        times = list(self.arrival_times.values())
        if times and max(times) > 0:
            out["ru"] = sum(times) / (len(times) * max(times))
        if self.now > 0:
            busy = dict(self.busy_s)
            for _, c, item in self.in_flight:  # partly done work of jobs still running
                busy[c] += max(0.0, min(self.now, item.arrival) - item.dispatched_at)
            per_client = [busy[c] / self.now for c in sorted(busy)]
            out["utilisation"] = sum(per_client) / len(per_client)
            out["client_utilisation"] = [round(u, 6) for u in per_client]
        if self.clock is not None and hasattr(self.clock, "collect"):
            out.update(self.clock.collect())
        return out

    # -- snapshots (checkpoint/resume of asynchronous runs) ----------------------------------

    def runtime_state(self) -> dict[str, Any]:
        """Everything besides the server/client states and the history that a resumed run needs.

        Taken between aggregations (``arrived`` is then empty). ``in_flight`` holds finished jobs
        awaiting their virtual arrival (update tensors included); scheduler and clock states come
        from their optional ``state_dict()``. Values are plain Python, tensors and attrs records.
        """
        state: dict[str, Any] = {
            "now": self.now, "since": self.since, "ledger_mark": self.ledger_mark,
            "busy_s": dict(self.busy_s), "in_flight": [attrs.asdict(item, recurse=False) for _, _, item in self.in_flight],
        }
        for name, owner in (("scheduler", getattr(self, "scheduler", None)), ("clock", self.clock)):
            if owner is not None and hasattr(owner, "state_dict"):
                state[name] = owner.state_dict()
        return state

    def load_runtime_state(self, state: dict[str, Any]) -> None:
        """Restore :meth:`runtime_state` after :meth:`setup` (the scheduler must exist)."""
        self.now, self.since = float(state["now"]), float(state["since"])
        self.ledger_mark = int(state["ledger_mark"])
        self.busy_s = {int(k): float(v) for k, v in state["busy_s"].items()}
        items = [InFlight(**d) for d in state["in_flight"]]
        self.in_flight = [(i.arrival, i.client_id, i) for i in items]
        heapq.heapify(self.in_flight)
        for name, owner in (("scheduler", getattr(self, "scheduler", None)), ("clock", self.clock)):
            if name in state and owner is not None and hasattr(owner, "load_state_dict"):
                owner.load_state_dict(state[name])

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
        record.update(self.hooks.fedcore_collect_metrics(ctx=ctx))
        if self.clock is not None:
            record.update(self._runtime_metrics())
        record["round_wall_s"] = time.perf_counter() - round_wall
        record["wall_s"] = time.perf_counter() - start_wall
        return record
