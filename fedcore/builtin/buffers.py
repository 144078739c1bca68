"""Float buffers (BatchNorm running statistics) are statistics, not weights: merge them as a convex mean.

A delta-based server step ``w + η Σ s_i (w_i − base_i)`` is fine for parameters but not for a running
variance: stale deltas and ``η`` can push it below zero (NaN losses follow). Any aggregator that forms
deltas should average the *uploaded values* of these entries with non-negative weights that sum to one,
so each one stays inside the range the clients reported.
"""
from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn

from fedcore.types import ClientUpdate, TensorDict


def float_buffer_names(model: nn.Module) -> frozenset[str]:
    """State-dict names of ``model``'s floating-point buffers (``running_mean``, ``running_var``, ...)."""
    return frozenset(name for name, buf in model.named_buffers() if buf is not None and buf.is_floating_point())


def convex_mean(updates: Sequence[ClientUpdate], weights: Sequence[float], keys: frozenset[str] | set[str]
                ) -> TensorDict:
    """For each of ``keys`` that some update carries: the mean of the uploaded values, weights normalised to 1.

    Negative weights are refused: the result must stay in the convex hull of what clients sent.
    """
    if any(w < 0 for w in weights):
        raise ValueError(f"convex_mean needs non-negative weights, got {list(weights)}")
    out: TensorDict = {}
    for key in sorted(k for k in keys if any(k in u.tensors for u in updates)):
        holders = [(u.tensors[key], float(w)) for u, w in zip(updates, weights) if key in u.tensors]
        total = sum(w for _, w in holders)
        share = [w / total for _, w in holders] if total > 0 else [1.0 / len(holders)] * len(holders)
        acc = torch.zeros_like(holders[0][0], dtype=torch.float64)
        for (tensor, _), wi in zip(holders, share):
            acc.add_(tensor.to(torch.float64), alpha=wi)
        out[key] = acc.to(holders[0][0].dtype)
    return out
