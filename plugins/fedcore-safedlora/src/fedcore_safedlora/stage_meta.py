"""What ``sa-fedlora-share`` tells its local update: the stage of the share, a typed record in ``Share.meta``.

The local update reads it with ``isinstance`` (:func:`stage_of`): E1 epochs with the proximal term in the
initiating stage, E2 plain epochs in the annealing stage. A share that carries none is treated as initiating.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs

from fedcore_safedlora.plan import ANNEALING, INITIATING

STAGE = "stage"  # the meta key; its value is always a ShareStage


@attrs.frozen(eq=False, kw_only=True)
class ShareStage:
    """The stage a share was cut in (SA-FedLoRA Alg. 1)."""

    stage: int = attrs.field(validator=attrs.validators.in_((INITIATING, ANNEALING)))
    """1: initiating (the whole model trains); 2: annealing (only the LoRA factors, and the head, train)."""
    transition_broadcast: bool = False
    """Whether this share also carries the stage-1 backbone, sent once at the switch to stage 2."""


def stage_of(meta: Mapping[str, Any]) -> int:
    """The stage of a share's meta; initiating when the share carries no :class:`ShareStage`."""
    found = meta.get(STAGE)
    return found.stage if isinstance(found, ShareStage) else INITIATING
