"""Aggregation and the round's history row: merge the arrivals, evaluate, collect metrics and runtime numbers."""
from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from fedcore.contexts import RoundContext
from fedcore.engine.aggregate_check import aggregate_component, check_fit, numeric_problem
from fedcore.engine.update_norms import norm_outliers
from fedcore.types import AggregateResult, ClientUpdate

if TYPE_CHECKING:
    from fedcore.engine.loop import Engine

EVENT_KEYS = ("failed", "rejected", "dropped", "share_changed", "cancelled", "unavailable", "dropout", "lost")
"""History-row keys for what happened to clients in a round (present only when non-empty)."""

log = logging.getLogger("fedcore")


def load_entries(model: nn.Module, state: dict[str, torch.Tensor]) -> None:
    """Copy ``state`` into ``model``'s entries in place; unknown names and shape changes are errors."""
    own = model.state_dict()
    unknown = sorted(set(state) - set(own))
    if unknown:
        raise KeyError(f"the aggregate names entries the global model does not have: {unknown[:8]}")
    with torch.no_grad():
        for k, v in state.items():
            if own[k].shape != v.shape:
                raise ValueError(f"aggregate entry {k!r} has shape {tuple(v.shape)}, the global model has "
                                 f"{tuple(own[k].shape)}")
            own[k].copy_(v)


def runtime_metrics(engine: Engine) -> dict[str, Any]:
    """Virtual time, Co-S2P's resource utilisation (Eq. 17) of this aggregation, and busy fractions."""
    out: dict[str, Any] = {"virtual_time": engine.now}
    times = list(engine.arrival_times.values())
    if times and max(times) > 0:
        out["ru"] = sum(times) / (len(times) * max(times))
    if engine.now > 0:
        busy = dict(engine.busy_s)
        for _, c, item in engine.in_flight:  # partly done work of jobs still running
            busy[c] += max(0.0, min(engine.now, item.arrival) - item.dispatched_at)
        per_client = [busy[c] / engine.now for c in sorted(busy)]
        out["utilisation"] = sum(per_client) / len(per_client)
        out["client_utilisation"] = [round(u, 6) for u in per_client]
    if engine.clock is not None:
        out.update(engine.clock.collect())
    return out


def aggregate(engine: Engine, ctx: RoundContext, arrived: list[ClientUpdate], events: dict[str, list[Any]],
              round_wall: float, start_wall: float, ledger_mark: int) -> dict[str, Any]:
    """Aggregate the arrivals into the global model and build the round's history row."""
    run = engine.run_ctx
    server = run.server
    agg_metrics: dict[str, float] = {}
    failure: str | None = None
    fault: dict[str, str] | None = None
    arrived, outliers = norm_outliers(arrived, engine.update_norm_bound)  # update sanity (engine/update_norms.py)
    for row in outliers:
        events["rejected"].append(row)
        log.warning("round %s: rejected the update of client %s: %s", ctx.round, row["client"], row["reason"])
    if arrived:
        arrived.sort(key=lambda u: u.client_id)
        # a copy: wrappers may replace the updates their inner aggregator sees (docs/hooks.md, fedcore_aggregate)
        result: AggregateResult = engine.hooks.fedcore_aggregate(model=server.model, updates=list(arrived), ctx=ctx)
        engine.now += max(0.0, float(result.virtual_seconds))
        check_fit(server.model, result.state, engine.pipeline)
        problem = numeric_problem(result.state)
        if problem is None:
            load_entries(server.model, result.state)
            for cid, view in result.per_client.items():
                server.client_views[int(cid)] = view
        else:  # keep the old model: one bad aggregate must not poison every later round
            component = aggregate_component(engine.pipeline)
            fault = {"component": component, "problem": problem}
            failure = f"the aggregate from {component} was refused: {problem}"
        agg_metrics = dict(result.metrics)
    elif any(events.values()):  # clients were given work this round and none of it reached aggregation
        what = ", ".join(f"{key} {len(items)}" for key, items in events.items() if items)
        failure = f"no client update reached aggregation ({what})"
    if failure is not None:
        log.warning("round %s failed, the global model is kept: %s", ctx.round, failure)
    server.version += 1
    record: dict[str, Any] = {"round": ctx.round, "clients": [u.client_id for u in arrived]}
    total = sum(u.num_examples for u in arrived)
    losses = [(u.metrics["loss"], u.num_examples) for u in arrived if "loss" in u.metrics]
    if losses:
        record["train_loss"] = float(sum(loss * n for loss, n in losses) / sum(n for _, n in losses))
    record["num_examples"] = total
    if any(u.staleness for u in arrived):
        record["max_staleness"] = max(u.staleness for u in arrived)
    for key, items in events.items():
        if items:
            record[key] = items
    if failure is not None:
        record["round_failed"] = failure
    if fault is not None:
        record["aggregate_fault"] = fault
    new_rows = run.ledger.rows[ledger_mark:]
    record["bytes_up"] = sum(r.nbytes for r in new_rows if r.direction == "up")
    record["bytes_down"] = sum(r.nbytes for r in new_rows if r.direction == "down")
    record["bytes_up_total"] = run.ledger.total(direction="up")
    record["bytes_down_total"] = run.ledger.total(direction="down")
    record.update({f"agg_{k}": float(v) for k, v in agg_metrics.items()})
    if server.version % engine.eval_every == 0 or server.version == run.rounds:
        metrics = engine.hooks.fedcore_evaluate(model=server.model, dataset=run.test, clients=run.clients,
                                                states=run.client_states, ctx=ctx)
        record.update({k: float(v) for k, v in metrics.items()})
    record.update(engine.hooks.fedcore_collect_metrics(ctx=ctx))
    if engine.clock is not None:
        record.update(runtime_metrics(engine))
    record["round_wall_s"] = time.perf_counter() - round_wall
    record["wall_s"] = time.perf_counter() - start_wall
    return record
