"""What secure aggregation can wrap: aggregators of a mean update, shares that upload floating weights.

The server learns only the sum, so the aggregator behind ``secagg`` receives one update (the unmasked mean); a rule
that needs each client's own update (median, trimmed mean, Krum) is refused when the pipeline is built. An
aggregator declares that need with the class attribute ``needs_individual_updates = True``; the project's own
are known by name (the same list as fedcore-dp's).
"""
from __future__ import annotations

from typing import Any

from fedcore import ConfigError, Share

INDIVIDUAL_UPDATE_AGGREGATORS = frozenset({
    "median", "trimmed-mean", "krum", "multi-krum", "bulyan", "centered-clipping", "geometric-median",
    "masked-delta", "cos2p-aggregate", "kd-server", "lora-product-svd", "fltrust", "qffl",
})
"""Registered aggregators of the project that need each client's own update (robust rules, per-client merges)."""

SUM_CLIENTS = "secure_sum.clients"
"""``ClientUpdate.meta`` key of the released update: how many clients' changes its mean holds."""
SUM_MEMBERS = "secure_sum.members"
"""``ClientUpdate.meta`` key: each summed client's plain metadata (its id, its ``dp.*`` values), in id order."""


def registered_name(component: Any) -> str:
    import fedcore

    entry = fedcore.plugins.registry().find(component)
    return entry.name if entry is not None else type(component).__name__


def refuse_individual_aggregator(who: str, pipeline: Any) -> None:
    aggregator = pipeline.provider("aggregate")
    name = registered_name(aggregator)
    if getattr(type(aggregator), "needs_individual_updates", False) or name in INDIVIDUAL_UPDATE_AGGREGATORS \
            or getattr(type(aggregator), "merges_submodels", False):
        raise ConfigError(f"{who} gives the server only the sum of the clients' updates, but aggregate = {name!r} "
                          f"needs each client's own update; use an aggregator of the mean change (fedavg, fedbuff, "
                          f"fedasync or a server optimiser)")


def refuse_unmaskable_upload(who: str, share: Share) -> None:
    """One line when the share uploads entries that are not floating weights (features, logits, counters)."""
    state = share.module.state_dict()
    other = sorted(k for k in share.upload if share.kinds.get(k, "weights") != "weights")
    if other:
        raise ConfigError(f"{who} sums weight changes, but the share uploads {share.kinds[other[0]]!r} entries "
                          f"({', '.join(map(repr, other[:3]))}): a sum of them would reach the server, not each "
                          f"one; use it with a share that uploads weights (whole-model, lora-share, prompt-share)")
    ints = sorted(k for k in share.upload if k in state and not state[k].is_floating_point())
    if ints:
        raise ConfigError(f"{who} quantises floating entries; the share uploads integer entries "
                          f"({', '.join(map(repr, ints[:3]))})")


__all__ = ["INDIVIDUAL_UPDATE_AGGREGATORS", "SUM_CLIENTS", "SUM_MEMBERS", "refuse_individual_aggregator",
           "refuse_unmaskable_upload", "registered_name"]
