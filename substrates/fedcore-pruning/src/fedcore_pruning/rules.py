"""Index rules: which units a client keeps, as functions of the round (FedRolex, HeteroFL, rolling depth).

* FedRolex (Alam et al. 2022): for a dimension of size K and width ratio beta, round r keeps the rolling
  window ``{(r + j) mod K : j < ceil(beta K)}``, so every unit is trained equally often over K rounds.
* HeteroFL (Diao et al. 2021): the static prefix ``{0, ..., ceil(beta K) - 1}``.
* Co-S2P's depth window (spec 004 §1.3 decision): start ``s = (q - 1) * step mod (L - k + 1)``.

Both width rules prune heads (whole heads, as structured units) and MLP hidden units; the residual
stream stays ``embed_dim`` wide (embedding-dimension pruning is planned, see the README).
"""
from __future__ import annotations

from collections.abc import Callable
import math

from fedcore.errors import ConfigError
from fedcore_pruning.shape import ViTShape
from fedcore_pruning.spec import SubmodelSpec

IndexRule = Callable[[int, int, int], tuple[int, ...]]  # (size, keep, round) -> kept indices


def _check_ratio(field: str, ratio: float) -> None:
    if not (isinstance(ratio, (int, float)) and not isinstance(ratio, bool) and 0.0 < ratio <= 1.0):
        raise ConfigError(f"{field}={ratio!r} must be a number in (0, 1]")


def kept_count(size: int, ratio: float) -> int:
    """``ceil(ratio * size)``, at least 1 (a tiny epsilon absorbs float noise such as 0.75 * 4 = 3.0000001)."""
    _check_ratio("width", ratio)
    return max(1, min(size, math.ceil(ratio * size - 1e-9)))


def rolling_indices(size: int, keep: int, round: int) -> tuple[int, ...]:
    """FedRolex: ``keep`` consecutive indices starting at ``round mod size``, wrapping around."""
    _check_keep(size, keep)
    return tuple(sorted((round + j) % size for j in range(keep)))


def prefix_indices(size: int, keep: int, round: int = 0) -> tuple[int, ...]:
    """HeteroFL: the first ``keep`` indices, whatever the round."""
    _check_keep(size, keep)
    return tuple(range(keep))


def _check_keep(size: int, keep: int) -> None:
    if not 1 <= keep <= size:
        raise ConfigError(f"keep={keep} must be in [1, {size}]")


def rolling_window_start(depth: int, length: int, round: int, step: int = 1) -> int:
    """Co-S2P depth window start for global round ``round`` (1-based): slides ``step`` blocks per round."""
    if not 1 <= length <= depth:
        raise ConfigError(f"window length={length} must be in [1, depth={depth}]")
    if round < 1:
        raise ConfigError(f"round={round} is 1-based; must be >= 1")
    return ((round - 1) * step) % (depth - length + 1)


def width_spec(shape: ViTShape, width: float, rule: IndexRule, round: int = 0) -> SubmodelSpec:
    """Full depth, ``ceil(width * K)`` heads and hidden units per block chosen by ``rule``, all outputs kept.

    A width whose share of the heads is below one whole head (``width * num_heads < 1``) is refused: rounding
    it up to one head would exceed the client's budget by up to ``num_heads`` times.
    """
    check_width_keeps_a_head(shape, width)
    heads = rule(shape.num_heads, kept_count(shape.num_heads, width), round)
    hidden = rule(shape.mlp_hidden, kept_count(shape.mlp_hidden, width), round)
    return SubmodelSpec.build(shape, heads=[heads] * shape.depth, hidden=[hidden] * shape.depth)


def check_width_keeps_a_head(shape: ViTShape, width: float) -> None:
    """Refuse a width in (0, 1] that leaves no whole attention head (``width * num_heads < 1``)."""
    _check_ratio("width", width)
    if width * shape.num_heads < 1 - 1e-9:
        raise ConfigError(f"width={width} leaves no head: {width} x {shape.num_heads} heads = "
                          f"{width * shape.num_heads:g} < 1; the smallest width of this model is "
                          f"1/{shape.num_heads} = {1 / shape.num_heads:g}")


def fedrolex_spec(shape: ViTShape, width: float, round: int) -> SubmodelSpec:
    """The FedRolex submodel of ratio ``width`` in server round ``round`` (0-based, as in the paper's r)."""
    return width_spec(shape, width, rolling_indices, round)


def heterofl_spec(shape: ViTShape, width: float) -> SubmodelSpec:
    """The HeteroFL submodel of ratio ``width``: a fixed prefix of heads and hidden units."""
    return width_spec(shape, width, prefix_indices)
