"""Seeded client faults: offline at dispatch, vanishing mid-round, uploads lost in transit.

A fault is decided per ``(seed, round, client)`` stream, so the same seed fails the same clients
at the same points whatever the executor. The engine applies the plan (``fedcore.engine.dispatch``): an
unavailable client gets nothing and costs nothing; a client that drops out has downloaded its share,
works for a seeded fraction of its job, never uploads and keeps no local state from it; a lost upload
costs the full job and its upload bytes but never reaches the server. The history row lists each
kind under ``unavailable``, ``dropout`` and ``lost``; nothing already aggregated is touched.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import attrs

from fedcore.errors import ConfigError
from fedcore.rng import numpy_generator
from fedcore.settings import setting

OUTCOMES = ("ok", "unavailable", "dropout", "lost")


@attrs.frozen(kw_only=True)
class FaultPlan:
    """What happens to one dispatched job; ``fraction`` is how much of a dropped-out job was done."""

    outcome: str = "ok"
    fraction: float = 1.0


def _outages(value: Any) -> tuple[tuple[int, int, int], ...]:
    out = []
    for item in value or ():
        if len(item) != 3:
            raise ConfigError(f"Faults.outages entry {item!r} must be (client, first_round, last_round)")
        c, a, b = (int(v) for v in item)
        if c < 0 or a < 0 or b < a:
            raise ConfigError(f"Faults.outages entry {item!r}: need client >= 0 and 0 <= first_round <= last_round")
        out.append((c, a, b))
    return tuple(out)


@attrs.frozen(eq=False, kw_only=True)
class Faults:
    """Probabilities of each fault per dispatched job, plus scripted outages.

    ``dropout_before``: the client is offline when dispatched (combined with its profile's
    availability when ``use_availability``). ``dropout_during``: it vanishes after a uniform
    fraction of its job. ``lost_upload``: its upload never arrives. ``outages``: ``(client,
    first_round, last_round)`` windows in which a client is offline (Tree Learning's dropout test).
    """

    dropout_before: float = setting(0.0, low=0.0, high=1.0, help="P(offline at dispatch)")
    dropout_during: float = setting(0.0, low=0.0, high=1.0, help="P(vanishes mid-round)")
    lost_upload: float = setting(0.0, low=0.0, high=1.0, help="P(upload lost in transit)")
    use_availability: bool = setting(True, help="also take the profile's availability as P(online)")
    outages: tuple[tuple[int, int, int], ...] = attrs.field(default=(), converter=_outages)

    def plan(self, *, seed: int, round: int, client: int, availability: float = 1.0) -> FaultPlan:
        """The seeded fate of ``client``'s job dispatched at global version ``round``."""
        for c, first, last in self.outages:
            if c == client and first <= round <= last:
                return FaultPlan(outcome="unavailable")
        u = numpy_generator(seed, "faults", round, client).random(4)
        online = (1.0 - self.dropout_before) * (availability if self.use_availability else 1.0)
        if u[0] >= online:
            return FaultPlan(outcome="unavailable")
        if u[1] < self.dropout_during:
            return FaultPlan(outcome="dropout", fraction=float(u[3]))
        if u[2] < self.lost_upload:
            return FaultPlan(outcome="lost")
        return FaultPlan()

    @classmethod
    def random_outage(cls, *, num_clients: int, fraction: float, first_round: int, rounds: int, seed: int,
                      **settings: Any) -> Faults:
        """``ceil(fraction·N)`` seeded clients offline for ``rounds`` rounds (Tree Learning §3.6.6: 10 % for 5).

        ``settings`` are the other :class:`Faults` fields (``dropout_before=``, ``use_availability=``, ...).
        """
        import math

        if not 0.0 < fraction <= 1.0:
            raise ConfigError(f"fraction={fraction}; must be in (0, 1]")
        k = math.ceil(fraction * num_clients)
        chosen = sorted(int(c) for c in numpy_generator(seed, "outage").choice(num_clients, size=k, replace=False))
        return cls(outages=tuple((c, first_round, first_round + rounds - 1) for c in chosen), **settings)


def count_outcomes(plans: Sequence[FaultPlan]) -> dict[str, int]:
    return {o: sum(p.outcome == o for p in plans) for o in OUTCOMES}
