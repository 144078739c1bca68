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


class InvalidUpdateError(FedcoreError):
    """A client update has NaN/Inf values, unknown keys or mismatched shapes."""


class ClientFailure(FedcoreError):
    """A client raised inside its work; carries the client id and the formatted traceback."""

    def __init__(self, client_id: int, traceback_text: str) -> None:
        super().__init__(f"client {client_id} failed:\n{traceback_text}")
        self.client_id = client_id
        self.traceback_text = traceback_text


def check_choice(field: str, value: object, choices: Iterable[object]) -> None:
    choices = list(choices)
    if value not in choices:
        raise ConfigError(f"{field}={value!r} is not allowed; choose one of: {', '.join(map(repr, choices))}")
