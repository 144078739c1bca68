"""Run-level metrics of Co-S2P from a run's history: RU (Eq. 17), busy fraction and the staleness histogram.

    RU = (1/Q) Σ_q Σ_{n ∈ N_q} Time(n) / (|N_q| · max_{n ∈ N_q} Time(n))          (Eq. 17)

N_q are the updates aggregated in round q and Time(n) their dispatch-to-arrival virtual seconds (spec
§7.14: communication included). The engine writes each round's inner term as ``ru`` and the busy
fraction Σ busy / (N · wall-clock) as ``utilisation``; the aggregator writes ``agg_staleness_<τ>`` counts.
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from fedcore.errors import ConfigError


def ru_eq17(times: Sequence[Sequence[float]]) -> float:
    """Eq. 17 from the durations of the updates aggregated in each round."""
    terms = []
    for q, round_times in enumerate(times):
        if not round_times or max(round_times) <= 0:
            raise ConfigError(f"round {q} has no positive update durations: {list(round_times)}")
        terms.append(sum(round_times) / (len(round_times) * max(round_times)))
    if not terms:
        raise ConfigError("RU needs at least one round")
    return sum(terms) / len(terms)


def run_ru(history: Iterable[Mapping[str, Any]]) -> float:
    """The mean of the engine's per-round RU terms (Eq. 17 over the run); needs a clock."""
    terms = [float(row["ru"]) for row in history if "ru" in row]
    if not terms:
        raise ConfigError("the history has no 'ru' column; run with a clock ([clock] in TOML, clock=SimClock())")
    return sum(terms) / len(terms)


def staleness_histogram(history: Iterable[Mapping[str, Any]]) -> dict[int, int]:
    """Aggregated updates per staleness τ over the run (from cos2p-aggregate's ``agg_staleness_<τ>``)."""
    out: dict[int, int] = {}
    for row in history:
        for key, value in row.items():
            if key.startswith("agg_staleness_"):
                tau = int(key.rsplit("_", 1)[1])
                out[tau] = out.get(tau, 0) + int(value)
    return dict(sorted(out.items()))
