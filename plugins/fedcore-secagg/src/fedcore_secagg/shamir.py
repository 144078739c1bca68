"""Shamir's t-out-of-n secret sharing over GF(2^255 - 19): any ``t`` shares recover the secret, fewer say nothing."""
from __future__ import annotations

from collections.abc import Mapping, Sequence
import random

PRIME = 2**255 - 19
SHARE_BYTES = 32


def split(secret: int, holders: Sequence[int], threshold: int, rng: random.Random) -> dict[int, int]:
    """Shares of ``secret`` for each holder id: ``f(id + 1)`` of a random degree-``t-1`` polynomial with ``f(0)``
    the secret (``id + 1`` so that no holder evaluates at 0)."""
    if not 0 <= secret < PRIME:
        raise ValueError("the secret must be an element of the field")
    if not 1 <= threshold <= len(holders):
        raise ValueError(f"threshold {threshold} needs between 1 and {len(holders)} holders")
    coefficients = [secret] + [rng.randrange(PRIME) for _ in range(threshold - 1)]
    out = {}
    for h in holders:
        x, y = h + 1, 0
        for c in reversed(coefficients):
            y = (y * x + c) % PRIME
        out[h] = y
    return out


def reconstruct(shares: Mapping[int, int]) -> int:
    """Lagrange interpolation at 0 of the shares given (holder id -> share); exact with at least ``t`` of them."""
    xs = {h: h + 1 for h in shares}
    secret = 0
    for h, y in shares.items():
        num, den = 1, 1
        for o in shares:
            if o != h:
                num = num * (-xs[o]) % PRIME
                den = den * (xs[h] - xs[o]) % PRIME
        secret = (secret + y * num * pow(den, PRIME - 2, PRIME)) % PRIME
    return secret


__all__ = ["PRIME", "SHARE_BYTES", "reconstruct", "split"]
