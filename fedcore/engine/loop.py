"""The engine: owns the loop, the clock and the state; plugins only answer hook calls.

One pass of the loop is one *round* (one aggregation, one global version):

    round_start -> scheduler.dispatch -> per client: split_model + client view + download ->
    executor runs the wave through train_cohort (default: select_data + local_update per job) + upload ->
    arrivals in virtual-time order (client_done) -> scheduler.ready -> aggregate -> evaluate
    (every k rounds) -> collect_metrics -> round_end

The runtime state has one owner, :class:`~fedcore.engine.state.EngineState` (in-flight jobs, arrivals,
virtual time, busy time, ...), changed only through its operations. The concepts live in their own
modules, each taking the state and the engine's collaborators (:class:`~fedcore.engine.state.EngineParts`)
and returning values: :mod:`~fedcore.engine.dispatch` (whom to start, shares, downloads),
:mod:`~fedcore.engine.arrivals` (virtual time, validation), :mod:`~fedcore.engine.record` (aggregation and
the history row) and :mod:`~fedcore.engine.snapshot` (the checkpointable runtime state). Without a clock
every job takes zero virtual time and a round is a synchronous round.
"""
from __future__ import annotations

import functools
import time
from typing import TYPE_CHECKING, Any

from fedcore.contexts import RoundContext, RunContext
from fedcore.engine import arrivals, dispatch, record, snapshot
from fedcore.engine.history import History, RunResult
from fedcore.engine.pending import LazyStates, submit_of
from fedcore.engine.policies import adapt_clock, adapt_scheduler
from fedcore.engine.record import load_entries
from fedcore.engine.spec import RunSpec
from fedcore.engine.state import EVENT_KEYS, EngineParts, EngineState, InFlight
from fedcore.errors import ConfigError
from fedcore.jobs import InlineExecutor
from fedcore.runtime.clock import Clock
from fedcore.scheduling import SchedulerPolicy
from fedcore.types import ClientInfo, ClientState, Partition, ServerState

if TYPE_CHECKING:
    from fedcore.pipeline import Pipeline

__all__ = ["Clock", "EVENT_KEYS", "Engine", "InFlight", "RunSpec", "check_partition", "load_entries"]


def check_partition(partition: Partition, num_clients: int, train_size: int) -> None:
    if partition.num_clients != num_clients:
        raise ConfigError(f"the partition has {partition.num_clients} clients; num_clients={num_clients}")
    for c, part in enumerate(partition.train):
        if not part:
            raise ConfigError(f"the partition leaves client {c} with no training samples; use fewer clients "
                              f"(num_clients={num_clients}) or a partitioner with a minimum size")
        if min(part) < 0 or max(part) >= train_size:
            bad = [i for i in part if not 0 <= i < train_size]
            raise ConfigError(f"client {c} has sample indices outside the training set of {train_size}: {bad[:5]}")


class Engine:
    """Runs one pipeline on one :class:`RunSpec`. Use :meth:`fedcore.Pipeline.run` rather than this directly.

    ``Engine(pipeline, spec)``; the keyword form ``Engine(pipeline, model=..., train=..., ...)`` builds the spec.
    """

    def __init__(self, pipeline: Pipeline, spec: RunSpec | None = None, **kwargs: Any) -> None:
        if spec is None:
            spec = RunSpec(**kwargs)
        elif kwargs:
            raise TypeError(f"Engine takes a RunSpec or keyword arguments, not both (got {sorted(kwargs)})")
        self.spec = spec
        self.pipeline = pipeline
        self.hooks = pipeline.hooks
        self.executor = spec.executor or InlineExecutor()
        self.clock = adapt_clock(spec.clock)
        self.faults = spec.faults
        self.eval_every = spec.eval_every
        self.profiles = spec.client_profiles()
        self.on_round = spec.on_round
        self.checkpoint = spec.checkpoint  # a fedcore.engine.checkpoint.Checkpointer: saves rounds, resumes a run
        self.placement = spec.placement(pipeline.components)  # model and data go to the device once, here
        model, train, test = spec.model, spec.train, spec.test
        if not self.placement.is_default:
            model = self.placement.place_model(model)
            train, test = self.placement.place_data(train), self.placement.place_data(test)
        self.run_ctx = RunContext(seed=spec.seed, num_clients=spec.num_clients, rounds=spec.rounds, train=train,
                                  test=test, server=ServerState(model=model), out_dir=spec.out_dir)
        self.history = History()
        self.state = EngineState(num_clients=spec.num_clients)  # the run's runtime state (what snapshots keep)
        self.submit = submit_of(self.executor)  # a parallel executor's submit(jobs) -> handles, or None
        self._parts: EngineParts | None = None

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
        scheduler = adapt_scheduler(self.hooks.fedcore_make_scheduler(clients=run.clients, run=run))
        self._parts = EngineParts(pipeline=self.pipeline, hooks=self.hooks, run=run, scheduler=scheduler,
                                  clock=self.clock, faults=self.faults, placement=self.placement,
                                  executor=self.executor, submit=self.submit, eval_every=self.eval_every,
                                  client_metrics=self.spec.client_metrics,
                                  update_norm_bound=self.spec.update_norm_bound)
        if self.clock is not None:
            self.clock.bind(run, self.pipeline)

    # -- the loop ----------------------------------------------------------------------------

    def run(self) -> RunResult:
        run, state = self.run_ctx, self.state
        self.setup()
        parts = self.parts
        if self.submit is not None:  # reading a client's state collects its pending job first
            run.client_states = LazyStates(run.client_states, state.pending)
        self.executor.start(self.pipeline, run.train)
        try:  # from here on the executor is closed whatever fails, run_start and the restore included
            self.hooks.fedcore_run_start(run=run)
            resumed = None if self.checkpoint is None else self.checkpoint.restore(
                run, history=self.history, device=self.placement.torch_device, load_runtime=self.load_runtime_state)
            start_wall = time.perf_counter() - (resumed.wall_s if resumed is not None else 0.0)
            while run.server.version < run.rounds and run.stop_reason is None:
                round_wall = time.perf_counter()
                ctx = RoundContext(round=run.server.version, seed=run.seed, run=run)
                self.hooks.fedcore_round_start(ctx=ctx)
                if run.stop_reason is not None:  # a component ended the run (RunContext.request_stop)
                    break
                if self.checkpoint is not None:
                    self.checkpoint.round_started(run)
                dispatch.dispatch(parts, state, ctx)
                arrivals.wait(parts, state, ctx, refill=functools.partial(dispatch.dispatch, parts, state, ctx))
                arrivals.cancel_stragglers(parts, state)
                closed = state.close_round()
                row = record.aggregate(parts, ctx, closed, runtime=functools.partial(state.utilisation, closed),
                                       elapse=state.elapse, round_wall=round_wall, start_wall=start_wall)
                state.mark_ledger(len(run.ledger.rows))
                self.history.rows.append(row)
                self.hooks.fedcore_round_end(ctx=ctx, record=row)
                if self.on_round is not None:
                    self.on_round(row)
                if self.checkpoint is not None:
                    self.checkpoint.after_round(run, history=self.history, runtime=self.runtime_state,
                                                wall_s=row["wall_s"])
            state.pending.collect_all()  # jobs still in flight commit their states, as inline ones did at dispatch
            self.hooks.fedcore_run_end(run=run, history=self.history.rows)
        finally:
            self.executor.close()
        return RunResult(history=self.history, model=run.server.model, ledger=run.ledger, run=run)

    @property
    def parts(self) -> EngineParts:
        """The engine's collaborators (made once at set-up): what :func:`fedcore.engine.dispatch.build_job` takes."""
        if self._parts is None:
            raise RuntimeError("the engine has no parts before setup()")
        return self._parts

    @property
    def scheduler(self) -> SchedulerPolicy:
        """The run's policy (adapted once at set-up)."""
        return self.parts.scheduler

    # -- snapshots (checkpoint/resume of asynchronous runs) ----------------------------------

    def runtime_state(self) -> dict[str, Any]:
        """See :func:`fedcore.engine.snapshot.runtime_state`."""
        scheduler = None if self._parts is None else self._parts.scheduler
        return snapshot.runtime_state(self.state, scheduler, self.clock)

    def load_runtime_state(self, saved: dict[str, Any]) -> None:
        """See :func:`fedcore.engine.snapshot.load_runtime_state`."""
        snapshot.load_runtime_state(self.state, saved, self.parts.scheduler, self.clock)
