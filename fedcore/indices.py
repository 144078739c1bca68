"""A client's sample indices, stored compactly: what :class:`fedcore.types.Partition` holds per client.

A tuple of Python ints costs about 40 bytes an index (an 8-byte slot and a 32-byte int object); with
10⁵ registered clients the partition was most of the engine's memory. :class:`IndexList` keeps the
same values in one machine array (8 bytes an index) and behaves as the tuple it replaces: a read-only
sequence of ``int`` that compares equal to the tuple or list of the same values, hashes like it,
slices, pickles, and converts to numpy without a copy of Python objects.
"""
from __future__ import annotations

from array import array
from collections.abc import Iterable, Iterator, Sequence
from typing import Any, overload

import numpy as np


class IndexList(Sequence[int]):
    """An immutable sequence of sample indices (``int``) backed by a 64-bit integer array."""

    __slots__ = ("_values",)

    def __init__(self, values: Iterable[int] = ()) -> None:
        if isinstance(values, IndexList):
            self._values: array[int] = values._values
        elif isinstance(values, np.ndarray):
            if values.ndim != 1 or values.dtype.kind not in "iub":
                raise TypeError(f"sample indices must be a 1-d integer array, got {values.dtype} of shape "
                                f"{values.shape}")
            self._values = array("q", values.astype(np.int64, copy=False).tobytes())
        else:
            self._values = array("q", (int(i) for i in values))

    def __len__(self) -> int:
        return len(self._values)

    @overload
    def __getitem__(self, i: int) -> int: ...

    @overload
    def __getitem__(self, i: slice) -> IndexList: ...

    def __getitem__(self, i: int | slice) -> int | IndexList:
        if isinstance(i, slice):
            out = IndexList()
            out._values = self._values[i]
            return out
        return self._values[i]

    def __iter__(self) -> Iterator[int]:
        return iter(self._values)

    def __contains__(self, value: object) -> bool:
        return value in self._values

    def __eq__(self, other: object) -> bool:
        if isinstance(other, IndexList):
            return self._values == other._values
        if isinstance(other, (tuple, list)):
            return len(other) == len(self) and all(a == b for a, b in zip(self._values, other))
        return NotImplemented

    def __hash__(self) -> int:
        return hash(tuple(self._values))  # equal to the tuple of its values, so hashed like it

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        out = np.frombuffer(self._values, dtype=np.int64).copy()  # a copy: the partition stays read-only
        return out if dtype is None else out.astype(dtype)

    def __reduce__(self) -> tuple[Any, ...]:
        return IndexList, (np.frombuffer(self._values, dtype=np.int64).copy(),)

    def __repr__(self) -> str:
        return f"IndexList({tuple(self._values)!r})"

    def nbytes(self) -> int:
        """Bytes held by the values (the array's buffer)."""
        return self._values.itemsize * len(self._values)


def index_lists(parts: Iterable[Iterable[int]]) -> tuple[IndexList, ...]:
    """One :class:`IndexList` per client from any iterable of index iterables (lists, tuples, numpy arrays)."""
    return tuple(IndexList(part) for part in parts)


__all__ = ["IndexList", "index_lists"]
