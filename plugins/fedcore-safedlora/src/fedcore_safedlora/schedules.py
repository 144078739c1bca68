"""Schedule primitives: pure functions of the round index (learning rates, budgets, LoRA ranks).

Every schedule is a small frozen record with ``__call__(t) -> float``; nothing keeps state, so the
value for round ``t`` is the same whoever asks and however often (a restarted run, a worker).

    decay = Ramp(start=12, end=8, t_start=2, t_end=12, shape="cubic")
    plan = Piecewise(pieces=((2, Constant(12)),), rest=decay)
    rank = RankSchedule(r_a=12, r_b=8, t_a=2, t_b=12, shape="cubic")    # SA-FedLoRA Eqs. 11-14, integers

The ramp shapes on progress ``p = (t - t_start) / (t_end - t_start)`` in [0, 1]:
``linear`` 1 - p (Eq. 13), ``cubic`` (1 - p)^3 (Eq. 12, the GMP / AdaLoRA budget curve) and
``cosine`` ½(1 + cos(π p / n)) -- the corrected form of Eq. 14, which as printed has no start/end
values and uses ``t`` for ``t - T_a``; with ``n = 1`` it reaches ``end`` exactly at ``t_end``.
"""
from __future__ import annotations

from collections.abc import Callable
import math
from typing import Any

import attrs

from fedcore.errors import ConfigError
from fedcore.settings import setting

SHAPES = ("linear", "cubic", "cosine")
ROUNDING = ("floor", "round", "ceil")


def shape_factor(shape: str, p: float, n: float = 1.0) -> float:
    """The fraction of ``start - end`` still left at progress ``p`` (1 at p=0; 0 at p=1 except cosine n>1)."""
    p = min(max(p, 0.0), 1.0)
    if shape == "linear":
        return 1.0 - p
    if shape == "cubic":
        return (1.0 - p) ** 3
    if shape == "cosine":
        return 0.5 * (1.0 + math.cos(math.pi * p / n))
    raise ConfigError(f"shape={shape!r} is not a schedule shape; choose one of: {', '.join(SHAPES)}")


@attrs.frozen(kw_only=True)
class Constant:
    """The same value every round."""

    value: float = setting(kind=(int, float))

    def __call__(self, t: int) -> float:
        return float(self.value)


@attrs.frozen(kw_only=True)
class Ramp:
    """``start`` until ``t_start``, then ``shape`` from start towards ``end``, and ``end`` after ``t_end``.

    ``t_start == t_end`` is a step: ``start`` before ``t_start``, ``end`` from it on.
    """

    start: float = setting(kind=(int, float))
    end: float = setting(kind=(int, float))
    t_start: int = setting(0, low=0)
    t_end: int = setting(1, low=0)
    shape: str = setting("linear", choices=SHAPES)
    n: float = setting(1.0, low=0.0, low_open=True, help="cosine period stretch (corrected Eq. 14)")

    def __attrs_post_init__(self) -> None:
        if self.t_end < self.t_start:
            raise ConfigError(f"Ramp.t_end={self.t_end} is before Ramp.t_start={self.t_start}")

    def __call__(self, t: int) -> float:
        if t < self.t_start:
            return float(self.start)
        if t > self.t_end or (t == self.t_end and self.t_end == self.t_start):
            return float(self.end)
        p = (t - self.t_start) / (self.t_end - self.t_start)
        return float(self.end + (self.start - self.end) * shape_factor(self.shape, p, self.n))


@attrs.frozen(kw_only=True)
class Piecewise:
    """``pieces = ((until, schedule), ...)``: each schedule holds for ``t < until``; ``rest`` afterwards.

    Schedules see the global ``t`` unless ``relative=True``, which passes ``t - (start of its piece)``.
    """

    pieces: tuple[tuple[int, Callable[[int], float]], ...] = attrs.field(converter=lambda v: tuple(tuple(p) for p in v))
    rest: Callable[[int], float]
    relative: bool = False

    def __attrs_post_init__(self) -> None:
        bounds = [int(u) for u, _ in self.pieces]
        if bounds != sorted(bounds):
            raise ConfigError(f"Piecewise.pieces bounds must increase, got {bounds}")

    def __call__(self, t: int) -> float:
        begin = 0
        for until, schedule in self.pieces:
            if t < until:
                return float(schedule(t - begin if self.relative else t))
            begin = int(until)
        return float(self.rest(t - begin if self.relative else t))


def integerise(value: float, rounding: str = "floor") -> int:
    """``floor`` (AdaLoRA's ``int()``), ``round`` or ``ceil``, tolerant to float noise (1e-9)."""
    if rounding == "floor":
        return int(math.floor(value + 1e-9))
    if rounding == "ceil":
        return int(math.ceil(value - 1e-9))
    if rounding == "round":
        return int(math.floor(value + 0.5))
    raise ConfigError(f"rounding={rounding!r}; choose one of: {', '.join(ROUNDING)}")


@attrs.frozen(kw_only=True)
class RankSchedule:
    """SA-FedLoRA's rank r_t (Eq. 11): heating ``r_a`` for t < t_a, decay to ``r_b`` on t_a..t_b, cooling ``r_b``.

    ``t`` counts rounds of the annealing stage (it restarts at 0 after the initiating stage). Values are
    integers in [r_b, r_a] and never increase. ``r_a == r_b`` is a fixed rank (ablations M1/M3).
    """

    r_a: int = setting(12, low=1, help="heating (initial) rank")
    r_b: int = setting(8, low=1, help="cooling (final) rank")
    t_a: int = setting(0, low=0, help="first round of the decay phase")
    t_b: int = setting(0, low=0, help="last round of the decay phase")
    shape: str = setting("cubic", choices=SHAPES)
    n: float = setting(1.0, low=0.0, low_open=True, help="cosine n")
    rounding: str = setting("floor", choices=ROUNDING)

    def __attrs_post_init__(self) -> None:
        if self.r_b > self.r_a:
            raise ConfigError(f"r_b={self.r_b} > r_a={self.r_a}: the cooling rank may not exceed the heating rank")
        if self.t_a > self.t_b:
            raise ConfigError(f"t_a={self.t_a} > t_b={self.t_b}: the decay phase must start before it ends")

    @property
    def ramp(self) -> Ramp:
        return Ramp(start=self.r_a, end=self.r_b, t_start=self.t_a, t_end=self.t_b, shape=self.shape, n=self.n)

    def phase(self, t: int) -> str:
        return "heating" if t < self.t_a else ("decay" if t <= self.t_b else "cooling")

    def __call__(self, t: int) -> int:
        if t < 0:
            raise ValueError(f"round t={t} is negative")
        r = integerise(self.ramp(t), self.rounding)
        return min(self.r_a, max(self.r_b, r))

    def values(self, rounds: int) -> list[int]:
        return [self(t) for t in range(rounds)]


def area(schedule: Callable[[int], Any], rounds: int) -> float:
    """Sum of the schedule over ``rounds`` rounds (e.g. rank x rounds, proportional to LoRA traffic)."""
    return float(sum(schedule(t) for t in range(rounds)))


__all__ = [
    "ROUNDING", "SHAPES", "Constant", "Piecewise", "Ramp", "RankSchedule", "area", "integerise", "shape_factor"
]
