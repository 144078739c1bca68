"""What Co-S2P's three components tell each other about one client's submodel: a typed record in the meta.

``cos2p-share`` puts a :class:`Cos2pSubmodel` into ``Share.meta[SUBMODEL]``; the engine carries it into the
update's meta; ``cos2p-update`` reads the phase and the mask settings from it and replaces it with a copy that
names the submodel it actually trained (a mask round trains the binarized masks, not the full-width window it
was sent); ``fedcore_adapt_update`` marks a stale update that it mapped back to global coordinates; and
``cos2p-aggregate`` reads the sent and trained specs and the teacher exit. Each reader checks the record with
``isinstance`` (:func:`submodel_of`): an update without one is a whole-model update, not a malformed dict.

The record is frozen and made of attrs records, tuples and numbers, so a checkpoint of an asynchronous run
saves it field by field with the updates still in flight and the resumed run gets the same record back.
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import attrs

from fedcore_pruning import SubmodelMismatchError, SubmodelSpec, ViTShape

SUBMODEL = "cos2p"  # the meta key; its value is always a Cos2pSubmodel
PHASES = ("mask", "weight")


def _ints(value: Iterable[int]) -> tuple[int, ...]:
    return tuple(int(v) for v in value)


def _fixed(value: Mapping[str, Any]) -> dict[str, tuple[tuple[int, ...], ...]]:
    return {str(p): tuple(tuple(int(i) for i in kept) for kept in blocks) for p, blocks in value.items()}


@attrs.frozen(eq=False, kw_only=True)
class Cos2pSubmodel:
    """One client's Co-S2P submodel, as sent and as trained (spec 004 §1.2-§1.7)."""

    spec: SubmodelSpec
    """The submodel the share cut out of the global model (its upload is in these coordinates)."""
    phase: str = attrs.field(validator=attrs.validators.in_(PHASES))
    """``"mask"``: learn the width masks, weights frozen (Eq. 2), then train; ``"weight"``: train the slice (Eq. 3)."""
    budget: float = attrs.field(converter=float)
    """The client's resource budget R_n."""
    width: float = attrs.field(converter=float)
    """R^width: the fraction of each held block's units the binarized masks keep."""
    offsets: tuple[int, ...] = attrs.field(converter=_ints)
    """Depths of the exits relative to the window start."""
    teacher: int = attrs.field(converter=int)
    """Depth of the deepest exit, whose values the aggregator averages into the eval head."""
    residual_masks: bool = attrs.field(converter=bool)
    """Whether the output rows of ``attn.proj`` and ``mlp.fc2`` are masked too."""
    budget_counts_inputs: bool = attrs.field(converter=bool)
    """Whether Eq. 2's kept ratio counts the kept inputs of ``proj`` and ``fc2``."""
    mask_init: float = attrs.field(converter=float)
    """The initial mask logit I0 of a client that has not learned masks yet."""
    fixed: Mapping[str, tuple[tuple[int, ...], ...]] = attrs.field(factory=dict, converter=_fixed)
    """Fixed random masks of the ablation (Tab. 3): kept indices per part and held block."""
    trained: SubmodelSpec | None = None
    """The submodel the client trained, set by ``cos2p-update``; ``None``: the sent one."""
    global_coordinates: bool = False
    """Whether ``fedcore_adapt_update`` has already mapped the (stale) update back into global coordinates."""

    @property
    def trained_spec(self) -> SubmodelSpec:
        return self.spec if self.trained is None else self.trained

    def checked(self, shape: ViTShape) -> Cos2pSubmodel:
        """This record, when its submodel was cut from a ViT of ``shape`` (the global model's); else one error."""
        for spec in (self.spec, self.trained_spec):
            if attrs.asdict(spec.shape) != attrs.asdict(shape):
                raise SubmodelMismatchError(f"the update's submodel was cut from a ViT of shape "
                                            f"{attrs.asdict(spec.shape)}; the global model is {attrs.asdict(shape)}")
        return self


def submodel_of(meta: Mapping[str, Any]) -> Cos2pSubmodel | None:
    """The Co-S2P submodel record of a share's or update's meta; ``None`` when it carries none."""
    found = meta.get(SUBMODEL)
    return found if isinstance(found, Cos2pSubmodel) else None
