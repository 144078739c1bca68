"""Resource budgets: a client's kept fraction R_n split into a depth window and a width (Co-S2P Sec. 4.1, App. E).

R_n = R^width · R^depth with R^width / R^depth = ``ratio`` (1 in the paper, Tab. 8 ablates 0.5 and 2).
A client trains k_n = ⌊L · R^depth⌋ consecutive blocks and keeps a fraction R^width of each masked layer.
Its early exits sit at the window offsets ⌊L · R_i^depth⌋ of every client i no deeper than itself
(Sec. 4.2); the deepest exit, at the top of its window, is the distillation teacher.
"""
from __future__ import annotations

from collections.abc import Sequence
import math

import attrs

from fedcore.errors import ConfigError
from fedcore_pruning import ViTShape

_EPS = 1e-9


def check_budget(field: str, budget: object) -> float:
    """``budget`` as a float in (0, 1], else one ConfigError naming the field."""
    if isinstance(budget, bool) or not isinstance(budget, (int, float)) or not 0.0 < float(budget) <= 1.0:
        raise ConfigError(f"{field}={budget!r} is not a resource budget; it must be a number in (0, 1] "
                          "(the fraction of the global parameters the client trains)")
    return float(budget)


@attrs.frozen(kw_only=True)
class ClientBudget:
    """What a budget means for one client of a ViT of ``depth`` blocks and ``num_heads`` heads."""

    budget: float
    width: float  # R^width: kept fraction of every masked layer
    depth_rate: float  # R^depth
    window: int  # k_n trainable blocks
    offsets: tuple[int, ...]  # exit offsets inside the window, the last one is ``window`` (the teacher)

    @classmethod
    def plan(cls, shape: ViTShape, budget: float, *, ratio: float = 1.0,
             population: Sequence[float] = (), field: str = "budget") -> ClientBudget:
        """Split ``budget`` for ``shape``; ``population`` are every client's budgets (for the exit offsets)."""
        budget = check_budget(field, budget)
        width, depth_rate = split_budget(budget, ratio)
        if width * shape.num_heads < 1 - _EPS:
            raise ConfigError(
                f"{field}={budget} gives a width R^w={width:.4g}, which keeps no head of the {shape.num_heads} "
                f"per block (needs R^w >= 1/{shape.num_heads}); raise the budget or lower ratio={ratio}")
        k = window_blocks(shape.depth, depth_rate)
        own = {window_blocks(shape.depth, split_budget(check_budget(field, b), ratio)[1]) for b in population}
        offsets = tuple(sorted({o for o in own if o <= k} | {k}))
        return cls(budget=budget, width=width, depth_rate=depth_rate, window=k, offsets=offsets)


def split_budget(budget: float, ratio: float = 1.0) -> tuple[float, float]:
    """(R^width, R^depth) with product ``budget`` and quotient ``ratio``; R^depth above 1 is clipped into width."""
    if not (isinstance(ratio, (int, float)) and ratio > 0):
        raise ConfigError(f"ratio={ratio!r} (R^width / R^depth) must be a number > 0")
    depth = math.sqrt(budget / ratio)
    if depth > 1.0:
        depth = 1.0
    return budget / depth, depth


def window_blocks(depth: int, depth_rate: float) -> int:
    """k = max(1, ⌊L · R^depth⌋): the trainable window length."""
    k = max(1, math.floor(depth * depth_rate + _EPS))
    if k > depth:
        raise ConfigError(f"a window of {k} blocks lies beyond the model's depth {depth}")
    return k
