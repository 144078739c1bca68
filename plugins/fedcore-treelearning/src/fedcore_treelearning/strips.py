"""Vertical mode's feature slices: each client holds one width strip of every image (spec A9.4).

Strips must tile the input width (no gap, no overlap, every strip at least one column) and stay whole
through the client units: the merged map at each meeting point, and the classifier's input, must have the
shape the full image gives there. :func:`check_tiling` runs a probe through the tree and raises one
``ConfigError`` naming the strips, the splits and the layer where they stop tiling.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence

import torch
from torch import nn

from fedcore.errors import ConfigError
from fedcore_treelearning.tree import VERTICAL, merged_forward
from fedcore_treelearning.units import partition_units


def strip_bounds(width: int, clients: Sequence[int], widths: Sequence[int] | None = None
                 ) -> dict[int, tuple[int, int]]:
    """Column range ``[start, end)`` of each client's strip, in client order (equal strips if ``widths`` is None)."""
    n = len(clients)
    if n < 1:
        raise ConfigError("vertical mode needs at least one client")
    if widths is None:
        base = width // n
        if base < 1:
            raise ConfigError(f"vertical mode: {n} clients cannot each hold a strip of an input {width} columns wide")
        widths = [base] * (n - 1) + [width - base * (n - 1)]
    widths = list(widths)
    if len(widths) != n:
        raise ConfigError(f"vertical strips {widths} give {len(widths)} widths for {n} clients; give one per client")
    if any(isinstance(w, bool) or not isinstance(w, int) or w < 1 for w in widths) or sum(widths) != width:
        raise ConfigError(f"vertical strips {widths} do not tile the input: the widths must be ints >= 1 summing to "
                          f"the input width {width} (they sum to {sum(int(w) for w in widths)})")
    out, start = {}, 0
    for c, w in zip(clients, widths):
        out[c] = (start, start + w)
        start += w
    return out


def check_tiling(model: nn.Module, sample: torch.Tensor, splits: Mapping[int, int],
                 bounds: Mapping[int, tuple[int, int]]) -> None:
    """Raise unless the strips, cut at ``splits``, merge into the shape the whole ``sample`` has at the output."""
    units = [u for _, u in partition_units(model)]
    with torch.no_grad():
        full = sample
        for unit in units:
            full = unit(full)
        inputs = {}
        try:
            for c, s in splits.items():
                h = sample[..., bounds[c][0]:bounds[c][1]]
                for unit in units[:s - 1]:
                    h = unit(h)
                inputs[c] = h
            out = merged_forward(units, splits, inputs, VERTICAL)
        except (ConfigError, RuntimeError) as exc:
            raise ConfigError(f"vertical strips {_widths(bounds)} do not tile the input at splits {dict(splits)}: "
                              f"{str(exc).splitlines()[0]}") from None
    if out.shape != full.shape:
        raise ConfigError(f"vertical strips {_widths(bounds)} do not tile the input at splits {dict(splits)}: the "
                          f"merged tree outputs {tuple(out.shape)} where the whole image gives {tuple(full.shape)} "
                          f"(cut before the layers that pool the width away, or use strips that are multiples "
                          f"of the stride)")


def deepest_tiling_split(model: nn.Module, sample: torch.Tensor, bounds: Mapping[int, tuple[int, int]]) -> int:
    """The deepest split at which every client may cut with these strips (the solver's cap in vertical mode)."""
    n = len(partition_units(model))
    best = 0
    for s in range(2, n + 1):
        try:
            check_tiling(model, sample, {c: s for c in bounds}, bounds)
        except ConfigError:
            break
        best = s
    if best == 0:
        check_tiling(model, sample, {c: 2 for c in bounds}, bounds)  # raises the error for split 2
    return best


def _widths(bounds: Mapping[int, tuple[int, int]]) -> list[int]:
    return [b - a for a, b in bounds.values()]
