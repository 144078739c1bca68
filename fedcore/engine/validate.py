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
    finite = all_finite([*update.tensors.values(), *update.aux.values()])  # else: found entry by entry below
    for name, value in update.tensors.items():
        if not isinstance(value, torch.Tensor):
            return f"entry {name!r} is a {type(value).__name__}, not a tensor"
        base = update.base.get(name)
        if base is not None and base.shape != value.shape:
            return f"entry {name!r} has shape {tuple(value.shape)}, expected {tuple(base.shape)}"
        if not finite and value.is_floating_point() and not bool(torch.isfinite(value).all()):
            return f"entry {name!r} contains NaN or Inf"
    for name, value in update.aux.items():
        if not isinstance(value, torch.Tensor):
            return f"server-bound tensor {name!r} is a {type(value).__name__}, not a tensor"
        if not finite and value.is_floating_point() and not bool(torch.isfinite(value).all()):
            return f"server-bound tensor {name!r} contains NaN or Inf"
    return None


def all_finite(values: Sequence[object]) -> bool:
    """True only if every floating tensor among ``values`` is free of NaN and Inf, in one call: a NaN or Inf makes
    its tensor's norm, and so the total norm (torch's public ``get_total_norm``, fused per dtype), NaN or Inf.
    ``False`` also when the norm cannot say (a total that overflows, tensors the fused norm does not take): the
    caller then checks tensor by tensor. The check runs on the calling thread for every update, so one fused call
    instead of two kernels and a read-back per tensor (0.19 -> 0.05 ms a micro-CNN update)."""
    floats = [v for v in values if isinstance(v, torch.Tensor) and v.is_floating_point()]
    if not floats:
        return True
    try:
        return bool(torch.nn.utils.get_total_norm(floats, foreach=True).isfinite())
    except (RuntimeError, TypeError, NotImplementedError):
        return False
