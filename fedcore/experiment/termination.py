"""SIGTERM (``docker stop``, a cluster scheduler, a sweep whose parent died) handled like Ctrl-C.

Python's default for SIGTERM ends the process where it stands, so a run killed that way said ``state = running``
with a dead pid. :func:`terminate_as_interrupt` turns it into :class:`Terminated`, a ``KeyboardInterrupt``: the
run records ``interrupted`` and stays resumable, exactly as after Ctrl-C.
"""
from __future__ import annotations

import signal
import threading
from types import FrameType


class Terminated(KeyboardInterrupt):
    """SIGTERM arrived: ``fedcore`` exits 143 (128 + SIGTERM) after recording ``interrupted``."""


def _raise(signum: int, frame: FrameType | None) -> None:
    raise Terminated("SIGTERM")


def terminate_as_interrupt() -> None:
    """From now on SIGTERM raises :class:`Terminated` in the main thread (a no-op off the main thread)."""
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, _raise)


__all__ = ["Terminated", "terminate_as_interrupt"]
