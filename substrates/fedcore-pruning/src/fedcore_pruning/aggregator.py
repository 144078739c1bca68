"""The ``masked-delta`` aggregator: merges submodel updates element by element (FedRolex, HeteroFL, Co-S2P).

Each update becomes ``(Δ, mask)`` in global coordinates (``update_delta``); ``masked_weighted_delta``
moves every element by the weighted mean Δ of the clients that trained it, and elements nobody trained
keep their value. The weight rule is the ``weighting`` setting. Every update is checked before anything
merges, so one that does not fit the global model is one ``SubmodelMismatchError`` and the model is unchanged.

Under an asynchronous schedule a stale submodel update keeps its index map in ``meta``; this component
answers ``fedcore_adapt_update`` by scattering it to global shapes (the engine drops stale updates whose
shapes differ from the global model's), or drops it with the reason when its index map does not fit.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

import attrs
import torch
from torch import nn

import fedcore
from fedcore import RoundContext
from fedcore.builtin import convex_mean, float_buffer_names
from fedcore.errors import ConfigError
from fedcore.settings import setting
from fedcore.types import AggregateResult, ClientUpdate, DropUpdate, Upload
from fedcore_pruning.aggregate import masked_weighted_delta
from fedcore_pruning.errors import SubmodelMismatchError
from fedcore_pruning.shape import ViTShape
from fedcore_pruning.updates import SUBMODEL_META, to_global_coordinates, update_delta


def global_shape(model: nn.Module) -> ViTShape | None:
    """The global ViT's shape, or ``None`` for a model this substrate cannot slice."""
    try:
        return ViTShape.of(model)
    except ConfigError:
        return None


@attrs.frozen(eq=False, kw_only=True)
class MaskedDelta:
    """Aggregate slot: per element, the weighted mean change of the clients whose submodel held it.

    ``weighting``: ``uniform`` counts every client once per element (FedRolex, HeteroFL); ``samples``
    weighs by local sample counts. Whole-model updates (no index map) merge as full masks, so under
    ``weighting = "samples"`` and fresh updates this is FedAvg.
    """

    merges: ClassVar[Upload] = Upload.SUBMODEL | Upload.WEIGHTS
    """Sliced submodels (``submodel-share``) and whole-model updates (merged as full masks)."""

    weighting: str = setting("uniform", choices=("uniform", "samples"),
                             help="element weight of an update: 1 (count average) or its sample count")
    server_lr: float = setting(1.0, low=0.0, low_open=True, help="server step on the mean delta (1 = plain mean)")

    @fedcore.hookimpl
    def fedcore_aggregate(self, model: nn.Module, updates: Sequence[ClientUpdate], ctx: RoundContext
                          ) -> AggregateResult:
        state = model.state_dict()
        buffers = float_buffer_names(model)
        shape = global_shape(model) if any(SUBMODEL_META in u.meta for u in updates) else None
        pairs = []
        for u in updates:  # every update is validated before anything merges
            delta, mask = update_delta(u, state, shape)
            pairs.append(({k: v for k, v in delta.items() if k not in buffers},
                          {k: v for k, v in mask.items() if k not in buffers}))
        trained = sorted({k for _, mask in pairs for k in mask})
        weights = [float(u.num_examples) for u in updates]
        merged = masked_weighted_delta({k: state[k] for k in trained}, pairs, weights, rule=self.weighting,
                                       server_lr=self.server_lr)
        merged |= convex_mean(updates, weights, buffers)
        covered = sum(int(torch.stack([m[k] for _, m in pairs if k in m]).any(0).sum()) for k in trained)
        total = sum(v.numel() for v in state.values() if v.is_floating_point())
        return AggregateResult(state=merged, metrics={"coverage": covered / max(total, 1)})

    @fedcore.hookimpl
    def fedcore_adapt_update(self, update: ClientUpdate, model: nn.Module, ctx: RoundContext) -> Any:
        if SUBMODEL_META not in update.meta:
            return None
        try:
            return to_global_coordinates(update, model.state_dict(), global_shape(model))
        except SubmodelMismatchError as exc:
            return DropUpdate(reason=str(exc))
