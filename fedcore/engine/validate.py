"""Checks on a client update before it may reach the aggregator."""
from __future__ import annotations

from collections.abc import Sequence

import torch

from fedcore.types import ClientUpdate, Share


def update_problem(update: ClientUpdate, share: Share | None = None, *, upload: Sequence[str] | None = None
                   ) -> str | None:
    """Why ``update`` must be rejected, or ``None`` if it is acceptable.

    Rejects keys the share did not allow to upload, shapes that differ from what the client
    received, and any NaN/Inf value: a broken client never gets averaged into the global model.
    """
    allowed = set(share.upload if share is not None else (upload or ()))
    extra = sorted(set(update.tensors) - allowed)
    if extra:
        return f"uploaded entries {extra} that its share does not upload (allowed: {sorted(allowed)})"
    if update.num_examples <= 0:
        return f"num_examples={update.num_examples}; must be > 0"
    for name, value in update.tensors.items():
        if not isinstance(value, torch.Tensor):
            return f"entry {name!r} is a {type(value).__name__}, not a tensor"
        base = update.base.get(name)
        if base is not None and base.shape != value.shape:
            return f"entry {name!r} has shape {tuple(value.shape)}, expected {tuple(base.shape)}"
        if value.is_floating_point() and not bool(torch.isfinite(value).all()):
            return f"entry {name!r} contains NaN or Inf"
    for name, value in update.aux.items():
        if not isinstance(value, torch.Tensor):
            return f"server-bound tensor {name!r} is a {type(value).__name__}, not a tensor"
        if value.is_floating_point() and not bool(torch.isfinite(value).all()):
            return f"server-bound tensor {name!r} contains NaN or Inf"
    return None
