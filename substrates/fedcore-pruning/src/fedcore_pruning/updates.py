"""A client update as the merge needs it: ``(Δ, element mask)`` in the global model's coordinates.

A submodel share puts the spec into ``Share.meta["submodel"]`` (``SubmodelSpec.to_data()``); the engine
copies it into ``ClientUpdate.meta``, so the update carries its own index map, also while it is stale and
in flight. An update has one of three forms:

* **sliced** (a fresh submodel update): tensors in the submodel's shapes, scattered here;
* **global** (``meta["submodel_coordinates"] == "global"``): a stale update that ``to_global_coordinates``
  already scattered, so the engine's stale check (shapes equal to the global model's) lets it through;
* **whole-model** (no index map): every uploaded floating entry, every element trained.

Every check runs before a merge: an index map for another model shape, names outside the map, shapes
that do not fit it, or a missing ``base`` are a ``SubmodelMismatchError`` naming the client and the tensor.
"""
from __future__ import annotations

from collections.abc import Mapping

import attrs
import torch

from fedcore.errors import ConfigError
from fedcore.types import ClientUpdate, TensorDict
from fedcore_pruning.errors import SubmodelMismatchError
from fedcore_pruning.shape import ViTShape
from fedcore_pruning.slicing import element_mask, index_map, scatter, trainable_names
from fedcore_pruning.spec import SubmodelSpec

SUBMODEL_META = "submodel"
"""``Share.meta`` / ``ClientUpdate.meta`` key of the spec's plain data (``SubmodelSpec.to_data()``)."""
COORDINATES_META = "submodel_coordinates"
"""``ClientUpdate.meta`` key set to ``"global"`` once an update's tensors were scattered to global shapes."""


def submodel_of(update: ClientUpdate) -> SubmodelSpec | None:
    """The spec an update was made for, or ``None`` for a whole-model update."""
    data = update.meta.get(SUBMODEL_META)
    if data is None:
        return None
    try:
        return SubmodelSpec.from_data(data)
    except ConfigError as exc:
        raise SubmodelMismatchError(f"update of client {update.client_id}: its index map is invalid: {exc}") from None


def check_fits(spec: SubmodelSpec, shape: ViTShape | None, client_id: int) -> None:
    """Refuse an index map made for another global model."""
    if shape is None:
        raise SubmodelMismatchError(f"update of client {client_id} carries a submodel index map, but the global "
                                    "model is not a ViT this substrate can slice")
    mine, theirs = spec.shape.to_data(), shape.to_data()
    differ = [f"{k}={mine[k]} (global {theirs[k]})" for k in theirs if mine[k] != theirs[k]]
    if differ:
        raise SubmodelMismatchError(f"update of client {client_id}: its index map is for another model: "
                                    + ", ".join(differ))


def _check_base(update: ClientUpdate, names: list[str]) -> None:
    lacking = [n for n in names if n not in update.base]
    if lacking:
        raise SubmodelMismatchError(f"update of client {update.client_id} has no base (start values) for {lacking[:5]}")
    for n in names:
        if update.base[n].shape != update.tensors[n].shape:
            raise SubmodelMismatchError(f"update of client {update.client_id}: tensor {n} has shape "
                                        f"{tuple(update.tensors[n].shape)} but its base {tuple(update.base[n].shape)}")


def update_delta(update: ClientUpdate, global_state: Mapping[str, torch.Tensor], shape: ViTShape | None = None
                 ) -> tuple[TensorDict, dict[str, torch.Tensor]]:
    """``(Δ, mask)`` of one update in global coordinates, Δ = base − new where the mask is True.

    ``shape`` is the global model's (``ViTShape.of(model)``); needed only for updates with an index map.
    """
    spec = submodel_of(update)
    names = sorted(k for k, v in update.tensors.items() if v.is_floating_point())
    _check_base(update, names)
    if spec is None:
        for n in names:
            if n not in global_state or global_state[n].shape != update.tensors[n].shape:
                where = "is not in the global model" if n not in global_state else \
                    f"has shape {tuple(update.tensors[n].shape)}, the global model {tuple(global_state[n].shape)}"
                raise SubmodelMismatchError(f"whole-model update of client {update.client_id}: tensor {n} {where}")
        delta = {n: (update.base[n] - update.tensors[n]).to(global_state[n].dtype) for n in names}
        return delta, {n: torch.ones(global_state[n].shape, dtype=torch.bool, device=global_state[n].device)
                       for n in names}
    check_fits(spec, shape, update.client_id)
    outside = [n for n in names if n not in index_map(spec)]
    if outside:
        raise SubmodelMismatchError(f"update of client {update.client_id} has tensors outside its index map: "
                                    f"{outside[:5]}")
    names = [n for n in names if n in trainable_names(spec)]
    if update.meta.get(COORDINATES_META) == "global":
        mask = element_mask(spec, global_state, names)
        for n in names:
            if update.tensors[n].shape != global_state[n].shape:
                raise SubmodelMismatchError(f"update of client {update.client_id}: tensor {n} is marked global but "
                                            f"has shape {tuple(update.tensors[n].shape)}")
        delta = {n: torch.where(mask[n], update.base[n] - update.tensors[n], 0).to(global_state[n].dtype)
                 for n in names}
        return delta, mask
    zeros = {n: torch.zeros_like(global_state[n]) for n in names if n in global_state}
    try:
        full, written = scatter({n: update.base[n] - update.tensors[n] for n in names}, spec, into=zeros)
    except SubmodelMismatchError as exc:
        raise SubmodelMismatchError(f"update of client {update.client_id}: {exc}") from None
    return {n: full[n] for n in written}, written


def to_global_coordinates(update: ClientUpdate, global_state: Mapping[str, torch.Tensor], shape: ViTShape | None
                          ) -> ClientUpdate:
    """A sliced update with its tensors and base scattered into zeros of the global shapes (validated first).

    The engine drops a stale update whose shapes differ from the global model's; this is the form in
    which a stale submodel update reaches the merge (``fedcore_adapt_update``).
    """
    spec = submodel_of(update)
    if spec is None or update.meta.get(COORDINATES_META) == "global":
        return update
    update_delta(update, global_state, shape)  # every check, before anything is converted
    names = [n for n, v in update.tensors.items() if v.is_floating_point()]
    zeros = {n: torch.zeros_like(global_state[n]) for n in names}
    tensors, _ = scatter({n: update.tensors[n] for n in names}, spec, into=zeros)
    base, _ = scatter({n: update.base[n] for n in names}, spec, into=zeros)
    return attrs.evolve(update, tensors={n: tensors[n] for n in names}, base={n: base[n] for n in names},
                        meta={**update.meta, COORDINATES_META: "global"})
