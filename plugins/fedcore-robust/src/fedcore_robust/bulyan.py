"""Bulyan (El Mhamdi, Guerraoui, Rouault, ICML 2018, §4, Algorithm 1 with Krum as the selection rule).

For n changes of which up to f are Byzantine (``n ≥ 4f + 3``):

1. selection: θ = n − 2f times, take the Krum choice among the changes not yet selected (its score over the
   remaining ``r`` changes uses ``max(r − f − 2, 1)`` neighbours, as Flower's does where ``r − f − 2 < 1``);
2. aggregation: per coordinate, the mean of the β = θ − 2f selected values closest to the selected values'
   median (ties to the lower client id, so the result does not depend on the order updates arrive in).

Float buffers get step 2 over the selected clients' uploaded values (every result stays inside what they sent);
integer counters the largest selected value.
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
from fedcore_robust.changes import applied, client_changes, counters
from fedcore_robust.krum import krum_scores, lowest


def bulyan_selection(rows: torch.Tensor, f: int, ids: Sequence[int] | None = None) -> list[int]:
    """Step 1: the θ = n − 2f rows chosen one by one by Krum among the rows left, in the order chosen (ties to the
    lower ``ids``, default the row order)."""
    ids = list(range(rows.shape[0])) if ids is None else list(ids)
    left = list(range(rows.shape[0]))
    chosen: list[int] = []
    for _ in range(rows.shape[0] - 2 * f):
        best = left[lowest(krum_scores(rows[left], f), 1, [ids[i] for i in left])[0]]
        chosen.append(best)
        left.remove(best)
    return chosen


def closest_to_median_mean(stack: torch.Tensor, beta: int) -> torch.Tensor:
    """Step 2: per coordinate of ``stack`` (θ × ...), the mean of the β values closest to the coordinate's median.

    The median of an even count is the mean of the two middle values (numpy's, Flower's ``np.median``).
    """
    ordered = stack.sort(dim=0).values
    theta = stack.shape[0]
    median = ordered[(theta - 1) // 2] if theta % 2 else 0.5 * (ordered[theta // 2 - 1] + ordered[theta // 2])
    distance = (stack - median).abs()
    nearest = torch.argsort(distance, dim=0, stable=True)[:beta]
    return torch.gather(stack, 0, nearest).mean(dim=0)


@attrs.frozen(eq=False, kw_only=True)
class Bulyan:
    """Bulyan (El Mhamdi et al., 2018): Krum-selected θ = n − 2f changes, then per coordinate the mean of the
    β = θ − 2f closest to their median."""

    needs_individual_updates: ClassVar[bool] = True
    """It selects and ranks each client's change: one combined update would not do."""

    NAME: ClassVar[str] = "bulyan"

    f: int = setting(0, low=0, help="the number of Byzantine clients the rule must tolerate (n ≥ 4f + 3)")

    @classmethod
    def __fedcore_checks__(cls) -> Any:  # how the contract checks build and run it (fedcore.testing.CheckPlan)
        from fedcore.testing import CheckPlan

        return CheckPlan(expected_failures=lambda c: {
            "check_aggregate_single_client": f"Bulyan needs n ≥ 4f + 3 = {4 * c.f + 3} updates per aggregation; one "
                                             f"is refused"})

    def bound(self) -> tuple[int, str]:
        return 4 * self.f + 3, "n ≥ 4f + 3"

    @fedcore.hookimpl
    def fedcore_check_pipeline(self, pipeline: Any) -> None:
        refuse_schedule(self.NAME, self.f, *self.bound(), pipeline.provider("schedule"))

    @fedcore.hookimpl
    def fedcore_aggregate(self, model: nn.Module, updates: Sequence[ClientUpdate], ctx: RoundContext
                          ) -> AggregateResult:
        refuse_count(self.NAME, self.f, *self.bound(), len(updates))
        changes = client_changes(model, updates, self.NAME)
        ids = [u.client_id for u in updates]
        chosen = sorted(bulyan_selection(changes.rows, self.f, ids), key=lambda i: ids[i])  # step 2 ties: lower id
        beta = len(chosen) - 2 * self.f
        state: TensorDict = applied(model, changes, closest_to_median_mean(changes.rows[chosen], beta))
        for key in changes.buffers:
            values = [updates[i].tensors[key] for i in chosen if key in updates[i].tensors]
            if values:
                stack = torch.stack([v.to(torch.float64) for v in values])
                state[key] = closest_to_median_mean(stack, min(beta, len(values))).to(values[0].dtype)
        state.update(counters(updates, chosen))
        return AggregateResult(state=state, metrics={"selected": float(len(chosen)), "beta": float(beta)})
