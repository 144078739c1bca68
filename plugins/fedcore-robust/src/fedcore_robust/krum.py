"""Krum and Multi-Krum (Blanchard, El Mhamdi, Guerraoui, Stainer, NeurIPS 2017, §4).

For n changes of which up to f are Byzantine (``n > 2f + 2``), client i's score is the sum of its squared distances
to its ``n − f − 2`` nearest other changes; Krum takes the change with the lowest score, Multi-Krum the plain mean of
the ``m`` lowest-scoring ones (``m = n − f`` by default; ``m = 1`` is Krum). Ties go to the lower client id.
The rules run on the clients' changes (:mod:`fedcore_robust.changes`), unweighted.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

import attrs
import torch
from torch import nn

import fedcore
from fedcore import RoundContext
from fedcore.settings import setting
from fedcore.types import AggregateResult, ClientUpdate, TensorDict
from fedcore_robust.bounds import refuse_count, refuse_schedule
from fedcore_robust.changes import applied, client_changes, counters, mean_of_values


def squared_distances(rows: torch.Tensor) -> torch.Tensor:
    """``D[i, j] = ||rows[i] − rows[j]||²`` (float64, exact zeros on the diagonal)."""
    diff = rows[:, None, :] - rows[None, :, :]
    return (diff**2).sum(dim=-1)


def krum_scores(rows: torch.Tensor, f: int) -> torch.Tensor:
    """Each row's Krum score: the sum of its squared distances to its ``n − f − 2`` nearest other rows (at least 1)."""
    n = rows.shape[0]
    k = min(max(n - f - 2, 1), n - 1)
    if k <= 0:
        return torch.zeros(n, dtype=torch.float64, device=rows.device)
    d = squared_distances(rows)
    d.fill_diagonal_(float("inf"))
    return d.sort(dim=1).values[:, :k].sum(dim=1)


def lowest(scores: torch.Tensor, m: int, ids: Sequence[int]) -> list[int]:
    """Positions of the ``m`` lowest scores; ties go to the lower client id (whatever order the updates came in)."""
    return sorted(range(len(ids)), key=lambda i: (float(scores[i]), ids[i]))[:m]


def krum_bound(f: int) -> tuple[int, str]:
    return 2 * f + 3, "n > 2f + 2"


class _KrumChecks:
    @classmethod
    def __fedcore_checks__(cls) -> Any:  # how the contract checks build and run it (fedcore.testing.CheckPlan)
        from fedcore.testing import CheckPlan

        return CheckPlan(expected_failures=lambda c: {
            "check_aggregate_single_client": f"Krum needs n > 2f + 2 = {2 * c.f + 2} updates per aggregation; one "
                                             f"is refused"})


@attrs.frozen(eq=False, kw_only=True)
class Krum(_KrumChecks):
    """Krum (Blanchard et al., 2017): the one change closest to its ``n − f − 2`` nearest neighbours."""

    needs_individual_updates: ClassVar[bool] = True
    """It scores each client's change by its distances to the others: one combined update would not do."""

    NAME: ClassVar[str] = "krum"

    f: int = setting(0, low=0, help="the number of Byzantine clients the rule must tolerate (n > 2f + 2)")

    def kept(self, n: int) -> int:
        return 1

    @fedcore.hookimpl
    def fedcore_check_pipeline(self, pipeline: Any) -> None:
        refuse_schedule(self.NAME, self.f, *krum_bound(self.f), pipeline.provider("schedule"))

    @fedcore.hookimpl
    def fedcore_aggregate(self, model: nn.Module, updates: Sequence[ClientUpdate], ctx: RoundContext
                          ) -> AggregateResult:
        refuse_count(self.NAME, self.f, *krum_bound(self.f), len(updates))
        changes = client_changes(model, updates, self.NAME)
        ids = [u.client_id for u in updates]
        chosen = sorted(lowest(krum_scores(changes.rows, self.f), self.kept(len(updates)), ids))
        state: TensorDict = applied(model, changes, changes.rows[chosen].mean(dim=0))
        state.update(mean_of_values(updates, chosen, changes.buffers))
        state.update(counters(updates, chosen))
        return AggregateResult(state=state, metrics={"kept": float(len(chosen))})


@attrs.frozen(eq=False, kw_only=True)
class MultiKrum(Krum):
    """Multi-Krum (Blanchard et al., 2017): the mean of the ``m`` lowest-scoring changes (default n − f)."""

    NAME: ClassVar[str] = "multi-krum"

    m: int | None = setting(None, kind=int, low=1, optional=True,
                            help="how many lowest-scoring changes are averaged (default n − f; 1 is Krum)")

    def kept(self, n: int) -> int:
        return min(self.m if self.m is not None else n - self.f, n)
