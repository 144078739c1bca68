"""Progress of a run: a live ``rich`` display on a terminal, one plain line per round otherwise (CI, pipes).

The display learns about rounds from the engine's ``on_round`` callback and about finished clients
from :class:`ProgressObserver`, a component the runner adds to the pipeline it runs (never to the
manifest): it observes ``fedcore_client_trained``, so it ticks as each client (or each vectorised batch of
clients) finishes, in this process, without wrapping the local update (a wrapper would stop the
``vectorised`` cohort from vectorising).
"""
from __future__ import annotations

from collections.abc import Mapping
import os
import sys
import time
from typing import TYPE_CHECKING, Any, TextIO

import fedcore

if TYPE_CHECKING:  # rich is imported only when the live display starts
    from rich.progress import Progress, TaskID

    from fedcore.contexts import RoundContext
    from fedcore.types import ClientFailed, ClientUpdate

MODES = ("auto", "rich", "plain", "none")


def human_bytes(n: float) -> str:
    for unit in ("B", "kB", "MB", "GB", "TB"):
        if abs(n) < 1000 or unit == "TB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.2f} {unit}"
        n /= 1000.0
    return f"{n:.2f} TB"


def human_seconds(s: float) -> str:
    s = max(0.0, s)
    if s < 60:
        return f"{s:.1f}s"
    m, s = divmod(int(s), 60)
    return f"{m}m{s:02d}s" if m < 60 else f"{m // 60}h{m % 60:02d}m"


def accuracy_key(row: Mapping[str, Any]) -> str | None:
    """The row's headline accuracy: ``test_accuracy`` if present, else the first ``*accuracy`` key."""
    if "test_accuracy" in row:
        return "test_accuracy"
    return next((k for k in sorted(row) if k.endswith("accuracy") and isinstance(row[k], (int, float))), None)


class ProgressObserver:
    """Tells a display when a round starts and when each client's training finishes (failed clients do not count)."""

    def __init__(self, display: RunProgress | None) -> None:
        self._display = display

    def __reduce__(self) -> tuple[Any, ...]:  # on a worker process there is no display to tell
        return (ProgressObserver, (None,))

    @fedcore.hookimpl
    def fedcore_round_start(self, ctx: RoundContext) -> None:
        if self._display is not None:
            self._display.round_started(ctx.round)

    @fedcore.hookimpl
    def fedcore_client_trained(self, outcome: ClientUpdate | ClientFailed) -> None:
        from fedcore.types import ClientFailed

        if self._display is not None and not isinstance(outcome, ClientFailed):
            self._display.client_finished()


class RunProgress:
    """``mode``: ``auto`` (rich on a terminal, plain otherwise), ``rich``, ``plain`` or ``none``."""

    def __init__(self, *, name: str, rounds: int, mode: str = "auto", stream: TextIO | None = None) -> None:
        if mode not in MODES:
            raise ValueError(f"progress mode {mode!r}; choose one of: {', '.join(MODES)}")
        self.stream = stream or sys.stderr
        if mode == "auto":
            tty = hasattr(self.stream, "isatty") and self.stream.isatty()
            mode = "rich" if tty and os.environ.get("TERM") != "dumb" and not os.environ.get("CI") else "plain"
        self.mode, self.name, self.rounds = mode, name, rounds
        self.clients_done = 0
        self._wall_sum, self._rounds_seen = 0.0, 0  # the mean round time without keeping every round's
        self._start = time.perf_counter()
        self._progress: Progress | None = None
        self._task: TaskID | None = None

    def start(self, completed: int = 0) -> None:
        self._start = time.perf_counter()
        self._first_round = completed
        if self.mode != "rich":
            if self.mode == "plain":
                self._line(f"[{self.name}] starting at round {completed}/{self.rounds}")
            return
        from rich.console import Console
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TextColumn,
            TimeElapsedColumn,
            TimeRemainingColumn,
        )

        self._progress = Progress(
            TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
            TextColumn("clients [cyan]{task.fields[clients]}"), TextColumn("acc [green]{task.fields[acc]}"),
            TextColumn("↑↓ {task.fields[bytes]}"), TimeElapsedColumn(), TextColumn("eta"), TimeRemainingColumn(),
            console=Console(file=self.stream), refresh_per_second=4)
        self._progress.start()
        self._task = self._progress.add_task(self.name, total=self.rounds, completed=completed, clients=0, acc="-",
                                             bytes="0 B")

    def note(self, line: str) -> None:
        """A message that must not be lost under the live display (a skipped checkpoint, a resume)."""
        if self._progress is not None:
            self._progress.console.print(f"[yellow]{line}")
        elif self.mode != "none":
            self._line(f"[{self.name}] {line}")

    def round_started(self, round: int) -> None:
        self.clients_done = 0
        self._update(clients=0, description=f"{self.name} round {round + 1}")

    def client_finished(self) -> None:
        self.clients_done += 1
        self._update(clients=self.clients_done)

    def round_done(self, record: Mapping[str, Any]) -> None:
        self._wall_sum += float(record.get("round_wall_s", 0.0))
        self._rounds_seen += 1
        done = int(record.get("round", self._rounds_seen - 1)) + 1
        key = accuracy_key(record)
        acc = f"{record[key]:.4f}" if key else "-"
        moved = human_bytes(record.get("bytes_up_total", 0) + record.get("bytes_down_total", 0))
        clients = 0 if "round_failed" in record and not record.get("clients") else \
            len(record.get("clients", ())) or self.clients_done
        events = round_events(record)
        if self._progress is not None:
            self._update(completed=done, clients=clients, acc=acc, bytes=moved)
            if events:  # rare, and worth keeping on screen: a line above the live bar
                self._progress.console.print(f"[yellow]{self.name} round {done}: {events}")
            return
        if self.mode == "none":
            return
        mean = self._wall_sum / self._rounds_seen
        parts = [f"[{self.name}] round {done}/{self.rounds}", f"clients {clients}"]
        if key:
            parts.append(f"{key} {acc}")
        if "train_loss" in record:
            parts.append(f"train_loss {record['train_loss']:.4f}")
        parts.append(f"up {human_bytes(record.get('bytes_up', 0))} down {human_bytes(record.get('bytes_down', 0))}")
        if "virtual_time" in record:
            parts.append(f"vtime {human_seconds(record['virtual_time'])}")
        if events:
            parts.append(events)
        parts.append(f"{mean:.2f} s/round")
        parts.append(f"eta {human_seconds(mean * (self.rounds - done))}")
        self._line("  ".join(parts))

    def close(self) -> None:
        if self._progress is not None:
            self._progress.stop()
            self._progress = None

    def _update(self, **fields: Any) -> None:
        """Update the live display's task, when there is one."""
        if self._progress is not None and self._task is not None:
            self._progress.update(self._task, **fields)

    def _line(self, text: str) -> None:
        print(text, file=self.stream, flush=True)


def round_events(record: Mapping[str, Any]) -> str:
    """Work of the round that stale or changed shares cost, for both progress modes ("" when none).

    Rejected updates (``rejected``), late split-learning server sessions applied or dropped (``split_stale_*``),
    updates dropped because the share they were made for no longer fits the model (``share_changed``), and a
    round that applied nothing (``round_failed``: no update arrived, or the aggregate was refused).
    """
    parts = []
    if "round_failed" in record:
        parts.append(f"round failed: {record['round_failed']}")
    if record.get("rejected"):  # NaN/Inf, wrong shapes, or beyond the update norm bound (engine/update_norms.py)
        parts.append(f"rejected: {len(record['rejected'])} update(s) (clients "
                     f"{', '.join(str(r['client']) for r in record['rejected'])})")
    if "split_stale_applied" in record or "split_stale_dropped" in record:
        parts.append(f"stale sessions {int(record.get('split_stale_applied', 0))} applied "
                     f"{int(record.get('split_stale_dropped', 0))} dropped")
    if record.get("share_changed"):
        parts.append(f"share changed: {len(record['share_changed'])} dropped")
    return "  ".join(parts)
