"""The network: the one place where data crosses between a client and the server.

Every payload (weights, adapter factors, prompts, split-learning activations and gradients,
distillation features and logits, loss queries, seeds) passes through a :class:`Channel`, which
counts its bytes by direction and kind in the :class:`Ledger`. Communication is therefore
measured from what was really sent, never estimated. In-process, a transfer is a detached copy,
so neither side can alias the other's tensors or autograd graph.
"""
from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
import numbers
from typing import Any, TypeVar

import attrs
import torch

P = TypeVar("P")
DIRECTIONS = ("up", "down")


def payload_nbytes(payload: Any) -> int:
    """Bytes of a payload: tensors by ``numel * element_size``, numbers as 8 bytes."""
    if isinstance(payload, torch.Tensor):
        return payload.numel() * payload.element_size()
    if isinstance(payload, Mapping):
        return sum(payload_nbytes(v) for v in payload.values())
    if isinstance(payload, (list, tuple)):
        return sum(payload_nbytes(v) for v in payload)
    if isinstance(payload, (numbers.Number, bool)) or payload is None:
        return 0 if payload is None else 8
    raise TypeError(f"cannot send a {type(payload).__name__} over the network; send tensors, dicts, lists or numbers")


def _copy(payload: Any) -> Any:
    """A detached copy of the same structure (any Mapping comes back as a dict)."""
    if isinstance(payload, torch.Tensor):
        return payload.detach().clone()
    if isinstance(payload, Mapping):
        return {k: _copy(v) for k, v in payload.items()}
    if isinstance(payload, (list, tuple)):
        return type(payload)(_copy(v) for v in payload)
    return payload


def send_entries(send: Any, entries: Mapping[str, Any], kinds: Mapping[str, str]) -> dict[str, Any]:
    """Send named entries with ``send`` (a channel's ``up`` or ``down``), one message per ledger kind.

    Entries not named in ``kinds`` go as ``weights``; the result keeps the entries' order.
    """
    groups: dict[str, dict[str, Any]] = {}
    for name, value in entries.items():
        groups.setdefault(kinds.get(name, "weights"), {})[name] = value
    received: dict[str, Any] = {}
    for kind, group in groups.items():
        received.update(send(kind, group))
    if not groups:
        send("weights", {})
    return {name: received[name] for name in entries}


@attrs.frozen(kw_only=True)
class Transfer:
    """One message: who, which round, which way, what kind, how many bytes."""

    round: int
    client: int
    direction: str
    kind: str
    nbytes: int
    messages: int = 1


class Channel:
    """One client's link to the server for one job. Records what it carries.

    ``rows`` is everything the channel carried; the :class:`Ledger` books them in instalments
    (:meth:`Ledger.book`): the download when the server sends it, the rest (per-batch traffic and
    the upload) when the job's result reaches the server. The channel remembers how far it was
    booked, also across a worker (it travels with the job and comes back with the result).
    """

    def __init__(self, client_id: int, round: int) -> None:
        self.client_id = client_id
        self.round = round
        self.rows: list[Transfer] = []
        self.booked = 0  # rows[:booked] are in the ledger

    def unbooked(self) -> tuple[Transfer, ...]:
        """What the channel carried since its last booking."""
        return tuple(self.rows[self.booked:])

    def _send(self, direction: str, kind: str, payload: P) -> P:
        self.rows.append(
            Transfer(round=self.round, client=self.client_id, direction=direction, kind=kind,
                     nbytes=payload_nbytes(payload))
        )
        return _copy(payload)

    def up(self, kind: str, payload: P) -> P:
        """Client -> server. Returns the server's copy."""
        return self._send("up", kind, payload)

    def down(self, kind: str, payload: P) -> P:
        """Server -> client. Returns the client's copy."""
        return self._send("down", kind, payload)

    def nbytes(self, direction: str | None = None, kind: str | None = None) -> int:
        return sum(r.nbytes for r in self.rows if (direction in (None, r.direction)) and (kind in (None, r.kind)))


class Ledger:
    """Every transfer of a run, queryable by round, client, direction and kind.

    The run's totals by direction and kind are kept as running sums (the engine reads them into every history
    row), folded in from the rows added since they were last asked for: O(new rows) per round, not O(the run).
    ``rows`` only grows through :meth:`merge` and :meth:`book`; assigning it (a resume) recounts the totals.
    """

    def __init__(self, rows: Iterable[Transfer] = ()) -> None:
        self.rows = list(rows)

    @property
    def rows(self) -> list[Transfer]:
        return self._rows

    @rows.setter
    def rows(self, rows: list[Transfer]) -> None:
        self._rows = rows
        self._totals: dict[tuple[str, str], int] = {}  # (direction, kind) -> bytes of rows[:_counted]
        self._counted = 0

    def merge(self, rows: Sequence[Transfer]) -> None:
        self.rows.extend(rows)

    def book(self, channel: Channel) -> tuple[Transfer, ...]:
        """Book what ``channel`` carried since its last booking; returns those transfers."""
        rows = channel.unbooked()
        self.rows.extend(rows)
        channel.booked = len(channel.rows)
        return rows

    def totals(self) -> dict[tuple[str, str], int]:
        """Bytes of the whole run by ``(direction, kind)`` (a copy), kept up to date incrementally."""
        if len(self._rows) < self._counted:  # the list was cut in place: count it again
            self.rows = self._rows
        for r in self._rows[self._counted:]:
            key = (r.direction, r.kind)
            self._totals[key] = self._totals.get(key, 0) + r.nbytes
        self._counted = len(self._rows)
        return dict(self._totals)

    def total(self, *, direction: str | None = None, kind: str | None = None, round: int | None = None,
              client: int | None = None) -> int:
        if round is None and client is None:  # the running totals: no pass over the run's rows
            return sum(n for (d, k), n in self.totals().items()
                       if (direction in (None, d)) and (kind in (None, k)))
        return sum(
            r.nbytes
            for r in self.rows
            if (direction in (None, r.direction)) and (kind in (None, r.kind))
            and (round in (None, r.round)) and (client in (None, r.client))
        )

    def by_kind(self, *, round: int | None = None) -> dict[tuple[str, str], int]:
        if round is None:
            return self.totals()
        out: dict[tuple[str, str], int] = defaultdict(int)
        for r in self.rows:
            if round in (None, r.round):
                out[(r.direction, r.kind)] += r.nbytes
        return dict(out)

    def to_rows(self) -> list[dict[str, Any]]:
        return [attrs.asdict(r) for r in self.rows]

    @classmethod
    def from_rows(cls, rows: Iterable[Mapping[str, Any]]) -> Ledger:
        return cls(Transfer(**r) for r in rows)
