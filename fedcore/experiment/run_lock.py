"""One writer per run directory: an OS lock (``flock``) on ``RUN_DIR/.lock`` held for the life of a run.

Two ``fedcore run --resume`` on one directory would both append rows (``0,1,2,3,3,4,4...``); with the lock the
second one stops at once with one line naming the holder's pid. ``flock`` belongs to the open file, so the
kernel drops it when the holder dies however it dies (``kill -9`` included): a stale lock cannot exist, and the
pid written into the file is only there for the message.
"""
from __future__ import annotations

import errno
import os
from pathlib import Path
import sys
from typing import IO, Any

from fedcore.errors import ConfigError

LOCK = ".lock"


class RunDirLocked(ConfigError):
    """Another live process writes this run directory (``fedcore`` exits 2 with this line)."""


class RunLock:
    """The exclusive lock of one run directory; :meth:`acquire` raises :class:`RunDirLocked` when it is held."""

    def __init__(self, directory: str | Path) -> None:
        self.path = Path(directory) / LOCK
        self._file: IO[str] | None = None

    @property
    def held(self) -> bool:
        return self._file is not None

    def acquire(self) -> RunLock:
        if self._file is not None:
            return self
        if sys.platform == "win32":  # no flock: one writer is then the user's to keep
            return self
        import fcntl

        f = open(self.path, "a+")
        try:
            fcntl.flock(f.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            f.seek(0)
            holder = f.read().strip() or "unknown"
            f.close()
            if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                raise RunDirLocked(f"{self.path.parent}: another fedcore process (pid {holder}) is writing this run "
                                   f"directory; wait for it to end or stop it first") from None
            raise
        try:  # the pid is only for the refusal message: a full disk must not stop the run here
            f.seek(0)
            f.truncate()
            f.write(f"{os.getpid()}\n")
            f.flush()
        except OSError:
            pass
        self._file = f
        return self

    def release(self) -> None:
        if self._file is not None:
            self._file.close()  # closing the descriptor drops the flock; the file stays (unlinking would race)
            self._file = None

    def __enter__(self) -> RunLock:
        return self.acquire()

    def __exit__(self, *exc: Any) -> None:
        self.release()


__all__ = ["LOCK", "RunDirLocked", "RunLock"]
