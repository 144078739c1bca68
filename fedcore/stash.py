"""Typed per-plugin storage (pytest's ``Stash``): plugins share state through keys, not attributes."""
from __future__ import annotations

from typing import Any, Generic, TypeVar

T = TypeVar("T")


class StashKey(Generic[T]):
    """A key for :class:`Stash`.

    Create one per value at module level: ``MEMORY = StashKey[Tensor]("pfedprompt.memory")``.

    ``name`` must be unique among the keys a run uses; checkpoints store values under it.
    """

    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        if not name or not isinstance(name, str):
            raise ValueError(f"StashKey name must be a non-empty string, got {name!r}")
        self.name = name

    def __repr__(self) -> str:
        return f"StashKey({self.name!r})"

    # Keys compare by name, so a checkpoint restores a value under the key its plugin created.
    def __eq__(self, other: object) -> bool:
        return isinstance(other, StashKey) and other.name == self.name

    def __hash__(self) -> int:
        return hash(("StashKey", self.name))


class Stash:
    """A dict keyed by :class:`StashKey` objects. Values are whatever the owning plugin stores."""

    __slots__ = ("_data",)

    def __init__(self) -> None:
        self._data: dict[StashKey[Any], Any] = {}

    def __setitem__(self, key: StashKey[T], value: T) -> None:
        self._data[key] = value

    def __getitem__(self, key: StashKey[T]) -> T:
        return self._data[key]

    def get(self, key: StashKey[T], default: T | None = None) -> T | None:
        return self._data.get(key, default)

    def setdefault(self, key: StashKey[T], default: T) -> T:
        return self._data.setdefault(key, default)

    def __delitem__(self, key: StashKey[Any]) -> None:
        del self._data[key]

    def __contains__(self, key: object) -> bool:
        return key in self._data

    def __len__(self) -> int:
        return len(self._data)

    def items(self) -> list[tuple[StashKey[Any], Any]]:
        return list(self._data.items())


__all__ = [
    "Stash", "StashKey"
]
