"""What secure aggregation can wrap: aggregators of a mean update, shares that upload floating weights.

The server learns only the sum, so the aggregator behind ``secagg`` receives one update (the unmasked mean); a rule
that needs each client's own update (median, trimmed mean, Krum) is refused when the pipeline is built. Which
aggregators need each update is their own declaration (``needs_individual_updates``);
:func:`fedcore.types.require_mean_aggregator` refuses them (as for fedcore-dp), in a line that begins with secagg's
words.
"""
from __future__ import annotations

from fedcore import ConfigError, Share
from fedcore.types import non_weight_uploads

SUM_CLIENTS = "secure_sum.clients"
"""``ClientUpdate.meta`` key of the released update: how many clients' changes its mean holds."""
SUM_MEMBERS = "secure_sum.members"
"""``ClientUpdate.meta`` key: each summed client's plain metadata (its id, its ``dp.*`` values), in id order."""


def refuse_unmaskable_upload(who: str, share: Share) -> None:
    """One line when the share uploads entries that are not floating weights (features, logits, counters)."""
    other = non_weight_uploads(share)
    if other:
        first = next(iter(other))
        raise ConfigError(f"{who} sums weight changes, but the share uploads {other[first]!r} entries "
                          f"({', '.join(map(repr, list(other)[:3]))}): a sum of them would reach the server, not "
                          f"each one; use it with a share that uploads weights (whole-model, lora-share, prompt-share)")
    state = share.module.state_dict()
    ints = sorted(k for k in share.upload if k in state and not state[k].is_floating_point())
    if ints:
        raise ConfigError(f"{who} quantises floating entries; the share uploads integer entries "
                          f"({', '.join(map(repr, ints[:3]))})")


__all__ = ["SUM_CLIENTS", "SUM_MEMBERS", "refuse_unmaskable_upload"]
