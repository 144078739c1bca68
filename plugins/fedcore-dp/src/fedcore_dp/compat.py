"""What DP-FedAvg can wrap: aggregators of a mean update, shares that upload weights.

DP-FedAvg releases one noised mean of clipped deltas, so the aggregator it wraps receives that one update: any
rule that is a function of the mean change works (FedAvg, FedBuff's and FedAsync's steps, server optimisers);
a rule that needs each client's own update (median, trimmed mean, Krum) would silently become the mean, so it
is refused when the pipeline is built. Which aggregators need each update is their own declaration
(``needs_individual_updates``); :func:`fedcore.types.require_mean_aggregator` refuses them, in a line that
begins with DP-FedAvg's words. Secure aggregation (``fedcore-secagg``) hands on the same kind of one update and
marks it with :data:`SUM_CLIENTS`.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from fedcore import ConfigError, Share
from fedcore.types import non_weight_uploads

SUM_CLIENTS = "secure_sum.clients"
"""``ClientUpdate.meta`` key of an update that is the mean of several clients' (``fedcore-secagg``): their number."""
SUM_MEMBERS = "secure_sum.members"
"""``ClientUpdate.meta`` key: the plain metadata of each summed client (its id, its ``dp.*`` values), in id order."""


def refuse_unbounded_upload(who: str, share: Share) -> None:
    """One line when the share uploads entries that are not weights (features, logits): their change has no
    meaning as a weight delta and cannot be clipped."""
    other = sorted((kind, k) for k, kind in non_weight_uploads(share).items())
    if other:
        kinds = sorted({kind for kind, _ in other})
        raise ConfigError(f"{who} bounds weight deltas, but the share uploads {', '.join(map(repr, kinds))} entries "
                          f"({', '.join(repr(k) for _, k in other[:3])}{', ...' if len(other) > 3 else ''}), which it "
                          f"cannot clip; use it with a share that uploads weights (whole-model, lora-share, "
                          f"prompt-share)")


def float_entries(names: Sequence[str], state: dict[str, Any]) -> tuple[str, ...]:
    return tuple(k for k in names if k in state and state[k].is_floating_point())


__all__ = ["SUM_CLIENTS", "SUM_MEMBERS", "float_entries", "refuse_unbounded_upload"]
