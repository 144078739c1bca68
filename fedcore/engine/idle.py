"""The idle clients a policy may start: every registered id but the busy ones, without listing them.

The engine hands a policy ``idle`` on every dispatch, which a continuous policy (FedBuff, FedAsync) gets
after every arrival. Listing 10⁵ registered clients each time would make the engine's cost grow with
the clients registered rather than the clients sampled; :class:`IdleClients` answers ``len``, ``in`` and
indexing in O(busy) instead, and lists itself only when a policy asks for all of it (iteration, numpy).
"""
from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any, overload

import numpy as np


class IdleClients(Sequence[int]):
    """Ids ``0 .. n-1`` except ``busy``, in id order: a read-only sequence, equal to the list it stands for."""

    def __init__(self, n: int, busy: Sequence[int]) -> None:
        self._n = n
        self._busy = sorted(busy)
        self._busy_set = frozenset(self._busy)

    def __len__(self) -> int:
        return self._n - len(self._busy)

    @overload
    def __getitem__(self, i: int) -> int: ...

    @overload
    def __getitem__(self, i: slice) -> list[int]: ...

    def __getitem__(self, i: int | slice) -> int | list[int]:
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]
        i = int(i)
        if i < 0:
            i += len(self)
        if not 0 <= i < len(self):
            raise IndexError(f"idle client index {i} out of range ({len(self)} idle)")
        x = i  # the i-th idle id is i shifted past every busy id at or below it
        for b in self._busy:
            if b > x:
                break
            x += 1
        return x

    def __contains__(self, c: object) -> bool:
        return isinstance(c, (int, np.integer)) and 0 <= int(c) < self._n and int(c) not in self._busy_set

    def __iter__(self) -> Iterator[int]:
        busy = self._busy_set
        return (c for c in range(self._n) if c not in busy)

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        return np.delete(np.arange(self._n, dtype=dtype or np.int64), self._busy)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, IdleClients):
            return self._n == other._n and self._busy == other._busy
        if isinstance(other, (list, tuple)):
            return len(other) == len(self) and all(a == b for a, b in zip(self, other))
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]  # equal to a list, so unhashable like one

    def __repr__(self) -> str:
        return f"IdleClients(n={self._n}, busy={self._busy})"


__all__ = ["IdleClients"]
