"""What DP-FedAvg can wrap: aggregators of a mean update, shares that upload weights.

DP-FedAvg releases one noised mean of clipped deltas, so the aggregator it wraps receives that one update: any
rule that is a function of the mean change works (FedAvg, FedBuff's and FedAsync's steps, server optimisers);
a rule that needs each client's own update (median, trimmed mean, Krum) would silently become the mean, so it
is refused when the pipeline is built. An aggregator says it needs individual updates with the class attribute
``needs_individual_updates = True``; the project's own are known by name. Secure aggregation
(``fedcore-secagg``) hands on the same kind of one update and marks it with :data:`SUM_CLIENTS`.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from fedcore import ConfigError, Share

INDIVIDUAL_UPDATE_AGGREGATORS = frozenset({
    "median", "trimmed-mean", "krum", "multi-krum", "bulyan", "centered-clipping", "geometric-median",
    "masked-delta", "cos2p-aggregate", "kd-server", "lora-product-svd", "fltrust", "qffl",
})
"""Registered aggregators of the project that need each client's own update (robust rules, per-client merges)."""

SUM_CLIENTS = "secure_sum.clients"
"""``ClientUpdate.meta`` key of an update that is the mean of several clients' (``fedcore-secagg``): their number."""
SUM_MEMBERS = "secure_sum.members"
"""``ClientUpdate.meta`` key: the plain metadata of each summed client (its id, its ``dp.*`` values), in id order."""


def registered_name(component: Any) -> str:
    import fedcore

    entry = fedcore.plugins.registry().find(component)
    return entry.name if entry is not None else type(component).__name__


def refuse_individual_aggregator(who: str, pipeline: Any) -> None:
    """One line naming ``who`` and the aggregator when the aggregator needs each client's own update."""
    aggregator = pipeline.provider("aggregate")
    name = registered_name(aggregator)
    if getattr(type(aggregator), "needs_individual_updates", False) or name in INDIVIDUAL_UPDATE_AGGREGATORS \
            or getattr(type(aggregator), "merges_submodels", False):
        raise ConfigError(f"{who} hands the aggregator one update (the mean of the clients'), but aggregate = "
                          f"{name!r} needs each client's own update; use an aggregator of the mean change "
                          f"(fedavg, fedbuff, fedasync or a server optimiser)")


def refuse_unbounded_upload(who: str, share: Share) -> None:
    """One line when the share uploads entries that are not weights (features, logits): their change has no
    meaning as a weight delta and cannot be clipped."""
    other = sorted({(share.kinds[k], k) for k in share.upload if share.kinds.get(k, "weights") != "weights"})
    if other:
        kinds = sorted({kind for kind, _ in other})
        raise ConfigError(f"{who} bounds weight deltas, but the share uploads {', '.join(map(repr, kinds))} entries "
                          f"({', '.join(repr(k) for _, k in other[:3])}{', ...' if len(other) > 3 else ''}), which it "
                          f"cannot clip; use it with a share that uploads weights (whole-model, lora-share, "
                          f"prompt-share)")


def float_entries(names: Sequence[str], state: dict[str, Any]) -> tuple[str, ...]:
    return tuple(k for k in names if k in state and state[k].is_floating_point())


__all__ = ["INDIVIDUAL_UPDATE_AGGREGATORS", "SUM_CLIENTS", "SUM_MEMBERS", "float_entries",
           "refuse_individual_aggregator", "refuse_unbounded_upload", "registered_name"]
