"""fedcore's exceptions. Each message names the field, the value and what is allowed."""
from __future__ import annotations

from collections.abc import Iterable
import difflib


class FedcoreError(Exception):
    """Base class of every error fedcore raises on purpose."""


class ConfigError(FedcoreError, ValueError):
    """A setting has the wrong type or range, or names something that does not exist."""


class UnknownComponentError(ConfigError, LookupError):
    def __init__(self, name: str, available: Iterable[str], kind: str = "component") -> None:
        available = sorted(available)
        close = difflib.get_close_matches(name, available, n=3)
        hint = f" (did you mean {', '.join(close)}?)" if close else ""
        super().__init__(
            f"unknown {kind} {name!r}{hint}; choose one of: {', '.join(available) or '(none installed)'}"
        )
        self.name = name
        self.available = available


class PluginConflictError(FedcoreError):
    """Two distributions offer the same plugin or component name."""


class BrokenPluginError(FedcoreError, ImportError):
    """A plugin that failed to import was asked for."""


class SlotConflictError(FedcoreError):
    """Two components provide the same slot in one pipeline."""


class MissingSlotError(FedcoreError):
    """A slot has no provider and no default, or its provider returned nothing."""


__all__ = [
    "BrokenPluginError", "ConfigError", "FedcoreError", "MissingSlotError", "PluginConflictError",
    "SlotConflictError", "UnknownComponentError",
]


def __getattr__(name: str) -> object:  # names removed in 0.2.0 keep working, with a warning, until 0.3.0
    if name not in ("InvalidUpdateError", "ClientFailure", "check_choice"):
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from fedcore._deprecated import removed_attribute

    return removed_attribute(__name__, name)
