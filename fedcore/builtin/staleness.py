"""Staleness functions s(τ) from FedAsync (Xie et al., 2019, §5.2): how much a stale update still counts.

``constant``: 1. ``polynomial``: (τ+1)^(-a). ``hinge``: 1 for τ <= b, else 1/(a(τ-b)+1).
FedBuff (Nguyen et al., AISTATS 2022) uses the polynomial with a = 0.5, i.e. 1/sqrt(1+τ).
"""
from __future__ import annotations

from fedcore.errors import ConfigError

STALENESS_FUNCTIONS = ("constant", "polynomial", "hinge")


def staleness_weight(kind: str, staleness: int, *, a: float = 0.5, b: float = 4.0) -> float:
    """s(τ) for ``kind`` in ``constant``, ``polynomial``, ``hinge``; τ < 0 is an error."""
    if staleness < 0:
        raise ConfigError(f"staleness={staleness}; must be >= 0")
    if kind == "constant":
        return 1.0
    if kind == "polynomial":
        return float((staleness + 1) ** (-a))
    if kind == "hinge":
        return 1.0 if staleness <= b else float(1.0 / (a * (staleness - b) + 1.0))
    raise ConfigError(f"staleness function {kind!r} is not known; choose one of: {', '.join(STALENESS_FUNCTIONS)}")
