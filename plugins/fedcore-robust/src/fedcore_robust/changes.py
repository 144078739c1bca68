"""The clients' changes as comparable vectors: what Krum, Bulyan and centred clipping measure distances on.

Each client's change is ``xᵢ − baseᵢ`` over the global model's floating parameter entries, flattened in entry order
into one float64 row (unweighted: a Byzantine client could claim any sample count). Under synchronous rounds every
base is the current model, so distances between changes are the paper's distances between the clients' models;
under buffered or semi-asynchronous schedules the change is the only comparable thing, since each client started
from its own global version. The chosen change is then applied to the *current* model.

Float buffers (BatchNorm statistics) are not in the vectors: they are statistics, and each rule gives them a value
inside the range of what clients uploaded (the chosen clients' values, or a convex combination). Uploads that are
not the global model's entries, with its shapes, for every client (distillation features, sliced width-submodels,
a share that differs per client) are refused in one line.
"""
from __future__ import annotations

from collections.abc import Sequence

import attrs
import torch
from torch import nn

from fedcore.builtin import float_buffer_names
from fedcore.errors import ConfigError
from fedcore.types import ClientUpdate, TensorDict


@attrs.frozen(kw_only=True)
class Changes:
    """``rows[i]`` is client i's flattened parameter change (float64); ``keys``/``shapes`` say how to unflatten."""

    rows: torch.Tensor
    keys: tuple[str, ...]
    shapes: tuple[tuple[int, ...], ...]
    buffers: tuple[str, ...]

    def unflatten(self, vector: torch.Tensor) -> dict[str, torch.Tensor]:
        out, start = {}, 0
        for key, shape in zip(self.keys, self.shapes):
            size = 1
            for s in shape:
                size *= s
            out[key] = vector[start:start + size].reshape(shape)
            start += size
        return out


def client_changes(model: nn.Module, updates: Sequence[ClientUpdate], component: str) -> Changes:
    """The comparable change vectors of ``updates``, or a one-line ``ConfigError`` saying why they are not."""
    own = model.state_dict()
    buffers = float_buffer_names(model)
    first = updates[0]
    keys = tuple(sorted(k for k, v in first.tensors.items() if v.is_floating_point() and k not in buffers))
    for u in updates:
        for key, value in u.tensors.items():
            if key not in own:
                raise ConfigError(f"{component} compares whole-model changes; client {u.client_id} uploads {key!r}, "
                                  f"which the global model has not (features or logits?)")
            if tuple(value.shape) != tuple(own[key].shape):
                raise ConfigError(f"{component} compares whole-model changes; client {u.client_id} uploads {key!r} "
                                  f"with shape {tuple(value.shape)}, the global model's is {tuple(own[key].shape)} "
                                  f"(a sliced submodel?): use the split's own aggregator, e.g. masked-delta")
        mine = tuple(sorted(k for k, v in u.tensors.items() if v.is_floating_point() and k not in buffers))
        if mine != keys:
            raise ConfigError(f"{component} compares vectors of the same entries; client {u.client_id} uploads "
                              f"{len(mine)} parameter entries, client {first.client_id} {len(keys)}")
        missing = [k for k in keys if k not in u.base]
        if missing:
            raise ConfigError(f"{component} needs the value client {u.client_id} started from for {missing[0]!r} "
                              f"(update.base) to form its change")
    rows = torch.stack([torch.cat([(u.tensors[k].to(torch.float64) - u.base[k].to(torch.float64)).reshape(-1)
                                   for k in keys]) if keys else torch.zeros(0, dtype=torch.float64)
                        for u in updates])
    return Changes(rows=rows, keys=keys, shapes=tuple(tuple(own[k].shape) for k in keys),
                   buffers=tuple(sorted(k for k in buffers if any(k in u.tensors for u in updates))))


def applied(model: nn.Module, changes: Changes, vector: torch.Tensor) -> TensorDict:
    """The current model's parameter entries moved by ``vector`` (a flattened change), in their dtypes."""
    current = model.state_dict()
    return {k: (current[k].to(torch.float64) + d).to(current[k].dtype) for k, d in changes.unflatten(vector).items()}


def mean_of_values(updates: Sequence[ClientUpdate], chosen: Sequence[int], keys: Sequence[str]) -> TensorDict:
    """Per entry of ``keys``, the plain mean of the values the ``chosen`` clients uploaded (float buffers)."""
    out: TensorDict = {}
    for key in keys:
        values = [updates[i].tensors[key] for i in chosen if key in updates[i].tensors]
        if values:
            out[key] = torch.stack([v.to(torch.float64) for v in values]).mean(dim=0).to(values[0].dtype)
    return out


def counters(updates: Sequence[ClientUpdate], chosen: Sequence[int]) -> TensorDict:
    """Integer entries (``num_batches_tracked``): the largest value among the chosen clients'."""
    out: TensorDict = {}
    for key in sorted({k for i in chosen for k, v in updates[i].tensors.items() if not v.is_floating_point()}):
        values = [updates[i].tensors[key] for i in chosen if key in updates[i].tensors]
        out[key] = max(values, key=lambda v: int(v.max()) if v.numel() else 0).clone()
    return out
