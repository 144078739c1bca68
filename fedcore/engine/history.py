"""The metrics history of a run: one row per aggregation, plus the ledger and the final model."""
from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
import json
import math
from pathlib import Path
from typing import Any

import attrs
from torch import nn

from fedcore.network import Ledger

REJECTED_STREAK = 2
"""A run whose last rounds (at least this many) all refused every update ends ``failed``."""


@attrs.define(kw_only=True, eq=False)
class History:
    """Round rows (dicts of plain JSON values) with a few conveniences for reading them."""

    rows: list[dict[str, Any]] = attrs.field(factory=list)

    def __len__(self) -> int:
        return len(self.rows)

    def __iter__(self) -> Iterator[dict[str, Any]]:
        return iter(self.rows)

    def __getitem__(self, i: int) -> dict[str, Any]:
        return self.rows[i]

    def replace(self, rows: list[dict[str, Any]]) -> None:
        """Put back the rows of a resumed run."""
        self.rows = rows

    def column(self, key: str) -> list[Any]:
        return [r.get(key) for r in self.rows]

    def last(self, key: str) -> Any:
        """The last non-missing value of ``key`` (evaluation does not run every round)."""
        for r in reversed(self.rows):
            if r.get(key) is not None:
                return r[key]
        raise KeyError(f"no round recorded {key!r}; recorded keys: {sorted({k for r in self.rows for k in r})}")

    def best(self, key: str) -> float:
        values = [v for v in self.column(key) if isinstance(v, (int, float)) and not math.isnan(v)]
        if not values:
            raise KeyError(f"no round recorded {key!r}")
        return max(values)

    def failure(self) -> str | None:
        """Why the run as a whole failed, or ``None``: it did when no round applied an aggregate of client updates,
        or when the last :data:`REJECTED_STREAK` or more rounds applied none because every update was rejected or
        the aggregate refused (a poisoned global model: what a NaN weight does to every later round).

        A round applies one when some update reached aggregation and the aggregate passed the engine's
        checks (no ``aggregate_fault``); rounds that failed are marked ``round_failed`` in their rows.
        """
        if self.rows and not any(r.get("clients") and "aggregate_fault" not in r for r in self.rows):
            reasons = [r["round_failed"] for r in self.rows if "round_failed" in r]
            last = f"; last: {reasons[-1]}" if reasons else ""
            return f"no round of {len(self.rows)} applied a client update ({len(reasons)} failed{last})"
        streak = 0  # the rounds at the end in which every update was rejected or the aggregate refused
        for r in reversed(self.rows):
            if (r.get("clients") and "aggregate_fault" not in r) or not (r.get("rejected") or "aggregate_fault" in r):
                break
            streak += 1
        if streak >= REJECTED_STREAK:  # a poisoned model: every round from some point on was refused
            return (f"the last {streak} rounds of {len(self.rows)} applied no client update: every update was "
                    f"rejected or the aggregate refused (last: {self.rows[-1].get('round_failed')})")
        return None

    def comparable(self) -> list[dict[str, Any]]:
        """Rows without wall-clock fields: what must be identical between two runs with the same seed."""
        return [{k: v for k, v in r.items() if "wall" not in k} for r in self.rows]

    def write_jsonl(self, path: str | Path) -> None:
        Path(path).write_text("".join(json.dumps(r, sort_keys=True) + "\n" for r in self.rows))

    @classmethod
    def read_jsonl(cls, path: str | Path) -> History:
        lines = Path(path).read_text().splitlines()
        return cls(rows=[json.loads(line) for line in lines if line.strip()])


@attrs.define(kw_only=True, eq=False)
class RunResult:
    """What ``Pipeline.run`` returns."""

    history: History
    model: nn.Module
    ledger: Ledger
    run: Any = attrs.field(repr=False)

    def summary(self) -> Mapping[str, Any]:
        out: dict[str, Any] = {"rounds": len(self.history)}
        for key in ("test_accuracy", "test_loss"):
            try:
                out[key] = self.history.last(key)
            except KeyError:
                pass
        out["bytes_up"] = self.ledger.total(direction="up")
        out["bytes_down"] = self.ledger.total(direction="down")
        return out


def merge_metrics(parts: Sequence[Mapping[str, float] | None], owners: Sequence[str]) -> dict[str, float]:
    """Merge observer metric dicts; a key contributed twice is an error naming both contributors."""
    merged: dict[str, float] = {}
    seen: dict[str, str] = {}
    for part, owner in zip(parts, owners):
        for k, v in (part or {}).items():
            if k in merged:
                raise ValueError(f"metric {k!r} is contributed by both {seen[k]} and {owner}")
            merged[k], seen[k] = v, owner
    return merged
