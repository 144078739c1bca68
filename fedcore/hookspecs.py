"""Hook specifications for fedcore plugins.

Three kinds of hooks, in three sections below:

* **Registration hooks** are called once per process by the plugin catalogue.
* **Slot hooks** are points of variation: ``firstresult=True``, exactly one provider per pipeline,
  any number of ``wrapper=True`` wrappers around the provider. A slot with no provider gets the
  built-in default; two providers are an error naming both.
* **Observer hooks** are broadcasts: every implementation runs, in pipeline order.

Call every hook with keyword arguments only. Hooks run at round/client granularity, never per
batch: inside a local update, write plain torch. ``docs/hooks.md`` maps every seed method onto
these hooks and shows the lifecycle.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import pluggy

if TYPE_CHECKING:  # keep this module cheap to import and free of cycles (pytest/tox pattern)
    import torch
    from torch import nn

    from fedcore.contexts import RoundContext, RunContext
    from fedcore.engine.client_job import ClientJob
    from fedcore.pipeline import Pipeline
    from fedcore.registry import ComponentRegistry
    from fedcore.scheduling import Scheduler
    from fedcore.types import (
        AggregateResult,
        ClientData,
        ClientFailed,
        ClientInfo,
        ClientState,
        ClientUpdate,
        DropUpdate,
        JobPlan,
        Partition,
        Share,
    )

from fedcore.markers import hookspec  # noqa: E402  (the leaf module both markers live in)

# ---------------------------------------------------------------------------------------------
# Registration hooks
# ---------------------------------------------------------------------------------------------


@hookspec
def fedcore_register_components(registry: ComponentRegistry) -> None:
    """Register a plugin's named components, datasets and models.

    Called once per process when the catalogue loads the plugin's entry-point module::

        @fedcore.hookimpl
        def fedcore_register_components(registry):
            registry.add("trimmed-mean", TrimmedMean)

    Names are lower-case and unique across all installed distributions; a clash is an error that
    names both distributions.
    """


@hookspec(historic=True)
def fedcore_addhooks(pluginmanager: pluggy.PluginManager) -> None:
    """Add plugin-defined hookspecs to a pipeline's manager (pytest's ``pytest_addhooks``).

    The only historic hook. New experimental hooks start here and move into the core when a
    second plugin needs them.
    """


# ---------------------------------------------------------------------------------------------
# Slot hooks: firstresult, exactly one provider, wrappers allowed
# ---------------------------------------------------------------------------------------------


@hookspec(firstresult=True)
def fedcore_partition(dataset: Any, num_clients: int, test_dataset: Any, run: RunContext) -> Partition:
    """Assign training samples (and optionally personal test samples) to ``num_clients`` clients.

    Draw randomness from ``run.np_rng("partition")`` or ``run.rng("partition")`` only.
    Every client must receive at least one sample. Stops at first non-None result.
    """


@hookspec(firstresult=True)
def fedcore_make_scheduler(clients: Sequence[ClientInfo], run: RunContext) -> Scheduler:
    """Return the scheduling policy object the engine drives (see :class:`fedcore.scheduling.Scheduler`).

    A factory, because a policy has several entry points (dispatch, when to aggregate). Synchronous
    rounds, deadlines, FedBuff, FedAsync and semi-asynchronous policies all have this shape.
    Stops at first non-None result.
    """


@hookspec(firstresult=True)
def fedcore_split_model(model: nn.Module, client: ClientInfo, state: ClientState, ctx: RoundContext) -> Share:
    """Decide the client's share of the global ``model`` this round and build its working copy.

    The share says which entries are downloaded and uploaded (the network counts exactly those),
    which parameters are trainable, and, for split learning, the server endpoint the client talks
    to per batch. A share may differ per client and per round (LoRA rank, pruned submodel, cut
    layer). Never modify ``model`` here. Do not apply ``ctx.server.client_views``: the engine loads a
    client's personalised download into the share's downloaded entries once, after this hook. Runs on the server.
    Stops at first non-None result.
    """


@hookspec(firstresult=True)
def fedcore_select_data(
    client: ClientInfo, indices: Sequence[int], dataset: Any, share: Share, state: ClientState, ctx: RoundContext
) -> Sequence[int]:
    """Choose the samples the client trains on this round: a subset of ``indices``.

    ``indices`` is the client's candidate pool (its partition, or ``Partition.pool`` when given).
    Wrappers narrow the result (``idx = yield; return idx[mask]``). Cache expensive scores in
    ``state.stash``. Runs on the client. Stops at first non-None result.
    """


@hookspec(firstresult=True)
def fedcore_local_update(
    client: ClientInfo, share: Share, data: ClientData, state: ClientState, ctx: RoundContext
) -> ClientUpdate:
    """Train ``share.module`` on ``data`` and return the update to upload.

    Return the new values of ``share.upload`` entries; the engine sends them through the
    client's channel. Per-batch traffic with a server endpoint goes through ``ctx.channel``.
    Draw randomness from ``ctx.rng(...)``. Runs on the client. Stops at first non-None result.
    """


@hookspec(firstresult=True)
def fedcore_train_cohort(jobs: Sequence[ClientJob], ctx: RoundContext) -> Sequence[ClientUpdate | ClientFailed]:
    """Train every job of one dispatch wave; return one ``ClientUpdate`` per job, in job order.

    Each job carries its client, share (download applied), pool, state, version and a context bound to
    the client with the client's own ``channel``; ``job.select_data()`` and ``job.local_update(indices)``
    call the pipeline's providers. The default (``per-job``) runs each job through them one after another,
    so a pipeline without a cohort provider behaves exactly as before the slot existed. A cohort trainer
    (per-batch lockstep against one shared endpoint, vectorised training of many clients) replaces it;
    it must send every client's per-batch traffic over that client's channel and must not touch the
    global model. Return ``ClientFailed(client_id, error)`` for a client that failed; raising fails the
    whole cohort. The engine uploads each update, validates it and books the ledger as before. Under a
    parallel executor (Ray, threads) a wave may be split into per-worker cohorts (``ctx.run`` is then ``None``);
    the threads executor runs them at once only for a provider whose class sets ``thread_safe = True``
    (torch's global RNG reached only through ``job.torch_rng()``, nothing mutable shared between jobs).
    Stops at first non-None result.
    """


@hookspec(firstresult=True)
def fedcore_aggregate(model: nn.Module, updates: Sequence[ClientUpdate], ctx: RoundContext) -> AggregateResult:
    """Merge the accepted client updates into the next global state.

    ``model`` is the current global model (read it, do not modify it: return new values in
    :class:`AggregateResult`). Updates carry ``staleness`` for asynchronous schedules. Server-side
    trainers (distillation) run here and keep their state in ``ctx.server.stash``.
    Updates with NaN/Inf or mismatched shapes were already rejected by the engine.
    Stops at first non-None result.
    """


@hookspec(firstresult=True)
def fedcore_evaluate(
    model: nn.Module, dataset: Any, clients: Sequence[ClientInfo], states: Mapping[int, ClientState], ctx: RoundContext
) -> Mapping[str, float]:
    """Evaluate and return metrics (``accuracy``, ``loss``, ...) for the history.

    The global evaluator tests ``model`` on the server's test set; personalised evaluators use
    each client's state and its personal test split (``ctx.run.partition.test``).
    Stops at first non-None result.
    """


# ---------------------------------------------------------------------------------------------
# Observer hooks: collecting, every implementation runs in pipeline order
# ---------------------------------------------------------------------------------------------


@hookspec
def fedcore_check_pipeline(pipeline: Pipeline) -> None:
    """The pipeline is assembled: refuse a combination this component cannot run, before any work.

    Raise :class:`fedcore.ConfigError` with one line naming this component, the one it cannot work with
    and what to use instead; ``pipeline.provider(slot)`` gives the other components and
    ``fedcore.scheduling.is_asynchronous(pipeline.provider("schedule"))`` tells an asynchronous schedule.
    Called once, when the pipeline is built, so ``fedcore run`` refuses before a run directory exists.
    """


@hookspec
def fedcore_run_start(run: RunContext) -> None:
    """The run is set up (partition done, clients known) and about to dispatch the first round."""


@hookspec
def fedcore_round_start(ctx: RoundContext) -> None:
    """A round is about to dispatch clients.

    Observers may transform the server state here (``ctx.server.model`` may be replaced, e.g. a
    stage switch that injects adapters), which is how a method changes every client's share at
    round start.
    """


@hookspec
def fedcore_client_trained(client: ClientInfo, outcome: ClientUpdate | ClientFailed, ctx: RoundContext) -> None:
    """A client's training finished where it ran, whichever cohort trained it; watch it, do not change it.

    Called once for every job of every wave: the ``per-job`` cohort calls it as each client finishes, a
    batched cohort as each batch of clients finishes (``job.trained(outcome)``), and the engine, when the
    cohort returns, for every job it did not report. ``outcome`` is the ``ClientUpdate`` before its upload,
    or ``ClientFailed``; ``ctx`` is the client-bound context. Runs where the client trained: on the
    worker under a distributed executor (``ctx.run`` is then ``None``), possibly on a worker thread. This
    is how a progress display or a logger follows training without wrapping ``fedcore_local_update``, which
    would make a vectorising cohort train one by one.
    """


@hookspec
def fedcore_client_done(client: ClientInfo, update: ClientUpdate, ctx: RoundContext) -> None:
    """A client's update arrived at the server (accepted or not, before aggregation)."""


@hookspec(firstresult=True)
def fedcore_adapt_update(update: ClientUpdate, model: nn.Module, ctx: RoundContext
                         ) -> ClientUpdate | DropUpdate | None:
    """A stale update arrived (made on an older global version): adapt it to the current global ``model``.

    Called for every update with ``update.version < ctx.server.version``, before the aggregator sees it.
    ``update.share_signature`` is the ``Share.signature`` of the share it was made for. Return a new
    :class:`ClientUpdate` (LoRA factors truncated or zero-padded to the current rank), a
    :class:`DropUpdate` with a reason for the history row (``"made for stage 1, the model is in stage 2"``),
    or ``None`` for no opinion. The first answer wins. Without one, the engine drops an update whose
    entries or shapes no longer match the global model, with a reason, and passes the others on.
    """


@hookspec(firstresult=True)
def fedcore_plan_job(client: ClientInfo, share: Share, samples: int, example: torch.Tensor, ctx: RoundContext
                     ) -> JobPlan | None:
    """A dry run (``fedcore plan``) asks what a client's job will do this round, without running it.

    ``share`` is the client's real share of the global model built on the meta device (shapes, no values), and
    ``example`` a meta batch of two of the client's inputs: run the share's modules on it to read the shapes of what
    crosses. ``samples`` is the number of samples the job trains on. Return a :class:`~fedcore.types.JobPlan`: every
    message the job sends after the share's download (per-batch traffic with ``share.endpoint``, the upload) and the
    samples its module processes. The
    component that trains the job answers: a local update whose traffic or work differs from the default, or a
    cohort trainer that replaces the per-job path. Without an answer the dry run assumes the default: the upload
    of ``share.upload`` (``fedcore.types.upload_messages``) and the local update's ``epochs`` passes over the
    samples in batches of its ``batch_size``. Pure: no state changes, nothing sent. The first answer wins.
    """


@hookspec
def fedcore_collect_metrics(ctx: RoundContext) -> Mapping[str, float] | None:
    """Contribute extra metrics to the round's history row; a key given twice is an error."""


@hookspec
def fedcore_round_end(ctx: RoundContext, record: Mapping[str, Any]) -> None:
    """A round's history row is complete (after aggregation and evaluation)."""


@hookspec
def fedcore_run_end(run: RunContext, history: Sequence[Mapping[str, Any]]) -> None:
    """The run finished; ``history`` is the full list of round rows."""


SLOT_HOOKS: dict[str, str] = {
    "partition": "fedcore_partition",
    "schedule": "fedcore_make_scheduler",
    "split": "fedcore_split_model",
    "select": "fedcore_select_data",
    "local_update": "fedcore_local_update",
    "cohort": "fedcore_train_cohort",
    "aggregate": "fedcore_aggregate",
    "evaluate": "fedcore_evaluate",
}
"""Slot name (the key used in configs) -> hook name."""

OBSERVER_HOOKS: tuple[str, ...] = (
    "fedcore_check_pipeline",
    "fedcore_run_start",
    "fedcore_round_start",
    "fedcore_client_trained",
    "fedcore_client_done",
    "fedcore_adapt_update",
    "fedcore_plan_job",
    "fedcore_collect_metrics",
    "fedcore_round_end",
    "fedcore_run_end",
)
