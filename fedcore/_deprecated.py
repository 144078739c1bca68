"""Names removed in 0.1.1 that keep working, with a ``DeprecationWarning``, until 1.0.

A module lists its removed names in ``REMOVED`` and forwards its ``__getattr__`` here. Delete an
entry (and its definition) in 1.0 (docs/plugins.md, "Versions").
"""
from __future__ import annotations

from collections.abc import Iterable
from typing import Any
import warnings

from fedcore.errors import ConfigError, FedcoreError


class InvalidUpdateError(FedcoreError):
    """Deprecated, never raised: the engine rejects bad updates itself (see ``fedcore.engine.validate``)."""


class ClientFailure(FedcoreError):
    """Deprecated, never raised: a client's exception propagates as it is."""

    def __init__(self, client_id: int, traceback_text: str) -> None:
        super().__init__(f"client {client_id} failed:\n{traceback_text}")
        self.client_id = client_id
        self.traceback_text = traceback_text


def check_choice(field: str, value: object, choices: Iterable[object]) -> None:
    """Deprecated: declare the field with ``fedcore.settings.setting(..., choices=...)`` instead."""
    choices = list(choices)
    if value not in choices:
        raise ConfigError(f"{field}={value!r} is not allowed; choose one of: {', '.join(map(repr, choices))}")


REMOVED: dict[str, tuple[Any, str]] = {
    # name -> (object, what to do instead)
    "InvalidUpdateError": (InvalidUpdateError, "it was never raised: the engine rejects bad updates itself"),
    "ClientFailure": (ClientFailure, "it was never raised: a client's exception propagates as it is"),
    "check_choice": (check_choice, "declare the field with fedcore.settings.setting(..., choices=...)"),
}


def removed_attribute(module: str, name: str) -> Any:
    """The removed ``module.name``, with a ``DeprecationWarning`` saying what to do instead."""
    obj, instead = REMOVED[name]
    warnings.warn(f"{module}.{name} is deprecated since fedcore 0.1.1 and will be removed in 1.0: {instead}",
                  DeprecationWarning, stacklevel=3)
    return obj
