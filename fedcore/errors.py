"""fedcore's exceptions. Each message names the field, the value and what is allowed."""
from __future__ import annotations

from collections.abc import Iterable
import difflib


class FedcoreError(Exception):
    """Base class of every error fedcore raises on purpose."""


class ConfigError(FedcoreError, ValueError):
    """A setting has the wrong type or range, or names something that does not exist."""


class UnknownComponentError(ConfigError, LookupError):
    """A name the catalogue does not hold. ``slot`` narrows the message to what can fill that slot;
    ``reason`` replaces the list of choices (a known package that is not installed)."""

    def __init__(self, name: str, available: Iterable[str], kind: str = "component", *, slot: str | None = None,
                 reason: str | None = None, note: str = "") -> None:
        available = sorted(available)
        what = f"unknown {kind} {name!r}" + (f" for slot {slot!r}" if slot else "")
        if reason is not None:
            message = f"{what}: {reason}"
        else:
            close = difflib.get_close_matches(name, available, n=3)
            hint = f" (did you mean {', '.join(close)}?)" if close else ""
            message = f"{what}{hint}; choose one of: {', '.join(available) or '(none installed)'}{note}"
        super().__init__(message)
        self.name = name
        self.available = available
        self.slot = slot


class PluginConflictError(FedcoreError):
    """Two distributions offer the same plugin or component name."""


class BrokenPluginError(FedcoreError, ImportError):
    """A plugin that failed to import was asked for."""


class SlotConflictError(FedcoreError):
    """Two components provide the same slot in one pipeline."""


class MissingSlotError(FedcoreError):
    """A slot has no provider and no default, or its provider returned nothing."""


class AggregateError(FedcoreError):
    """An aggregate does not fit the global model (an entry it does not have, or a changed shape).

    The message names the component that filled the ``aggregate`` slot. Numerical faults (NaN, Inf, a
    negative variance) are not raised: the engine reports the round and keeps the old model.
    """


__all__ = [
    "AggregateError", "BrokenPluginError", "ConfigError", "FedcoreError", "MissingSlotError", "PluginConflictError",
    "SlotConflictError", "UnknownComponentError",
]


def __getattr__(name: str) -> object:  # names removed in 0.1.1 keep working, with a warning, until 1.0
    if name not in ("InvalidUpdateError", "ClientFailure", "check_choice"):
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from fedcore._deprecated import removed_attribute

    return removed_attribute(__name__, name)
