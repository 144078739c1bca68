"""Aggregation and the round's history row: merge the arrivals, evaluate, collect metrics and runtime numbers."""
from __future__ import annotations

from collections.abc import Callable
import logging
import math
import time
from typing import Any

import torch
from torch import nn

from fedcore.contexts import RoundContext
from fedcore.engine.aggregate_check import aggregate_component, check_fit, numeric_problem
from fedcore.engine.state import EVENT_KEYS, ClosedRound, EngineParts
from fedcore.engine.update_norms import norm_outliers
from fedcore.types import AggregateResult, ClientUpdate

__all__ = ["EVENT_KEYS", "aggregate", "client_metric_columns", "load_entries", "numeric_metrics", "per_client_metrics"]

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


def numeric_metrics(update: ClientUpdate) -> dict[str, float]:
    """The numbers a local update reported (bools, strings, tensors of more than one value and NaN are left out)."""
    out = {}
    for key, value in update.metrics.items():
        if isinstance(value, torch.Tensor) and value.numel() == 1:
            value = value.item()
        if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
            out[str(key)] = float(value)
    return out


def client_metric_columns(arrived: list[ClientUpdate]) -> dict[str, float]:
    """Every metric the round's aggregated updates reported: ``client_<name>`` (mean weighted by each update's
    ``num_examples``, over the updates that reported it), ``client_<name>_min`` and ``client_<name>_max``."""
    values: dict[str, list[tuple[float, int]]] = {}
    for u in arrived:
        for key, value in numeric_metrics(u).items():
            values.setdefault(key, []).append((value, u.num_examples))
    out: dict[str, float] = {}
    for key in sorted(values):
        pairs = values[key]
        weight = sum(n for _, n in pairs)
        mean = sum(v * n for v, n in pairs) / weight if weight > 0 else sum(v for v, _ in pairs) / len(pairs)
        out[f"client_{key}"] = float(mean)
        out[f"client_{key}_min"] = min(v for v, _ in pairs)
        out[f"client_{key}_max"] = max(v for v, _ in pairs)
    return out


def per_client_metrics(arrived: list[ClientUpdate]) -> list[dict[str, Any]]:
    """One entry per aggregated update (client order): its client, weight, staleness and numeric metrics."""
    return [{"client": u.client_id, "num_examples": u.num_examples, "staleness": u.staleness, **numeric_metrics(u)}
            for u in arrived]


def aggregate(parts: EngineParts, ctx: RoundContext, closed: ClosedRound, *, runtime: Callable[[], dict[str, Any]],
              elapse: Callable[[float], None], round_wall: float, start_wall: float) -> dict[str, Any]:
    """Aggregate the closed round's arrivals into the global model; returns the round's history row.

    ``runtime`` gives the engine state's :meth:`~fedcore.engine.state.EngineState.utilisation` of the round when
    the row is complete (asked only under a clock); ``elapse`` lets the aggregation's own virtual seconds pass
    (:attr:`~fedcore.types.AggregateResult.virtual_seconds`, e.g. a secure-aggregation protocol's).
    """
    run = parts.run
    arrived, events = closed.arrived, closed.events
    server = run.server
    agg_metrics: dict[str, float] = {}
    failure: str | None = None
    fault: dict[str, str] | None = None
    arrived, outliers = norm_outliers(arrived, parts.update_norm_bound)  # update sanity (engine/update_norms.py)
    for row in outliers:
        events["rejected"].append(row)
        log.warning("round %s: rejected the update of client %s: %s", ctx.round, row["client"], row["reason"])
    if arrived:
        arrived.sort(key=lambda u: u.client_id)
        # a copy: wrappers may replace the updates their inner aggregator sees (docs/hooks.md, fedcore_aggregate)
        result: AggregateResult = parts.hooks.fedcore_aggregate(model=server.model, updates=list(arrived), ctx=ctx)
        elapse(result.virtual_seconds)
        check_fit(server.model, result.state, parts.pipeline)
        problem = numeric_problem(result.state)
        if problem is None:
            load_entries(server.model, result.state)
            for cid, view in result.per_client.items():
                server.client_views[int(cid)] = view
        else:  # keep the old model: one bad aggregate must not poison every later round
            component = aggregate_component(parts.pipeline)
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
    record.update(client_metric_columns(arrived))
    if parts.client_metrics:
        record["client_metrics"] = per_client_metrics(arrived)
    if any(u.staleness for u in arrived):
        record["max_staleness"] = max(u.staleness for u in arrived)
    for key, items in events.items():
        if items:
            record[key] = items
    if failure is not None:
        record["round_failed"] = failure
    if fault is not None:
        record["aggregate_fault"] = fault
    evaluated: dict[str, float] = {}
    if server.version % parts.eval_every == 0 or server.version == run.rounds:
        metrics = parts.hooks.fedcore_evaluate(model=server.model, dataset=run.test, clients=run.clients,
                                                states=run.client_states, ctx=ctx)
        evaluated = {k: float(v) for k, v in metrics.items()}
    collected = parts.hooks.fedcore_collect_metrics(ctx=ctx)
    # the byte columns after the evaluation: traffic it books (kd-eval's count_eval_traffic) is this round's
    new_rows = run.ledger.rows[closed.ledger_mark:]
    record["bytes_up"] = sum(r.nbytes for r in new_rows if r.direction == "up")
    record["bytes_down"] = sum(r.nbytes for r in new_rows if r.direction == "down")
    record["bytes_up_total"] = run.ledger.total(direction="up")
    record["bytes_down_total"] = run.ledger.total(direction="down")
    record.update({f"agg_{k}": float(v) for k, v in agg_metrics.items()})
    record.update(evaluated)
    record.update(collected)
    if parts.clock is not None:
        record.update(runtime())
        record.update(parts.clock.collect())
    record["round_wall_s"] = time.perf_counter() - round_wall
    record["wall_s"] = time.perf_counter() - start_wall
    return record
