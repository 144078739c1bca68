"""SecAgg+'s communication graph (Bell et al., CCS 2020, §3): each client shares keys and masks only with its
``k`` neighbours. Here a Harary graph ``H(k, n)`` (the k-connected graph with the fewest edges) over the clients in
a seeded random order, so no client chooses its neighbours."""
from __future__ import annotations

from collections.abc import Sequence
import math

import numpy as np


def default_degree(n: int) -> int:
    """``min(n - 1, 2·⌈log2 n⌉)``: logarithmic in the cohort, as SecAgg+ needs (8 of 9 at n = 10, 14 at 100)."""
    if n <= 1:
        return 0
    return min(n - 1, 2 * math.ceil(math.log2(n)))


def harary(clients: Sequence[int], degree: int, rng: np.random.Generator) -> dict[int, tuple[int, ...]]:
    """Neighbours of each client: ``H(k, n)`` on a random ring order; ``k >= n - 1`` gives the complete graph.

    Even ``k``: each node joins the ``k/2`` nearest on each side of the ring. Odd ``k`` adds the diametric node
    (for odd ``n``, ``i + (n+1)/2`` for ``i <= (n-1)/2``: one node gets two), so every degree is ``k`` or ``k + 1``.
    """
    ids = sorted(clients)
    n = len(ids)
    if n <= 1:
        return {c: () for c in ids}
    k = min(degree, n - 1)
    order = [ids[i] for i in rng.permutation(n)]
    edges: set[tuple[int, int]] = set()
    for i in range(n):
        for step in range(1, k // 2 + 1):
            edges.add(tuple(sorted((i, (i + step) % n))))  # type: ignore[arg-type]
        if k % 2 and (n % 2 == 0 or i <= (n - 1) // 2):  # West's construction: diameters (odd n: one node twice)
            j = (i + n // 2) % n if n % 2 == 0 else (i + (n + 1) // 2) % n
            edges.add(tuple(sorted((i, j))))  # type: ignore[arg-type]
    if k >= n - 1:
        edges = {(i, j) for i in range(n) for j in range(i + 1, n)}
    out: dict[int, set[int]] = {c: set() for c in ids}
    for i, j in edges:
        out[order[i]].add(order[j])
        out[order[j]].add(order[i])
    return {c: tuple(sorted(v)) for c, v in out.items()}


__all__ = ["default_degree", "harary"]
