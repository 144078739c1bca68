"""Communication cost as the paper reports it (spec §4.4): cumulative bytes in GiB at convergence or at a target.

The paper's CC/TC are S clients x (download + upload) x fp32 parameter bytes, summed to a round. In
fedcore the ledger counts exactly what crossed the network, and every history row carries the
running totals ``bytes_up_total`` / ``bytes_down_total``, so all three numbers are read off the history.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

GIB = 2 ** 30
MIB = 2 ** 20


def cumulative_bytes(row: Mapping[str, Any]) -> int:
    return int(row["bytes_up_total"]) + int(row["bytes_down_total"])


def cost_to_target(history: Sequence[Mapping[str, Any]], target: float, metric: str = "test_accuracy") -> int | None:
    """TC: cumulative bytes at the first round whose ``metric`` is >= ``target``; ``None`` if never reached."""
    for row in history:
        if metric in row and row[metric] >= target:
            return cumulative_bytes(row)
    return None


def convergence_round(history: Sequence[Mapping[str, Any]], metric: str = "test_accuracy", tol: float = 0.005) -> int:
    """The first round whose ``metric`` is within ``tol`` of the run's best (spec §7 item 10)."""
    rows = [r for r in history if metric in r]
    if not rows:
        raise ValueError(f"no history row has {metric!r}")
    best = max(r[metric] for r in rows)
    return next(int(r["round"]) for r in rows if r[metric] >= best - tol)


def converged_cost(history: Sequence[Mapping[str, Any]], metric: str = "test_accuracy", tol: float = 0.005) -> int:
    """CC: cumulative bytes up to the convergence round."""
    t = convergence_round(history, metric, tol)
    return cumulative_bytes(next(r for r in history if int(r["round"]) == t))


def reduction(cost: float, baseline: float) -> float:
    """Relative decline ``(baseline - cost) / baseline``, as the paper's 92.91 % and 93.62 %."""
    return (baseline - cost) / baseline
