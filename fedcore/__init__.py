"""fedcore: collaborative training of pre-trained models across heterogeneous edge clients.

The public API plugins import: ``hookimpl``, ``Pipeline``, ``get``, ``list_plugins``, the records in
``fedcore.types`` and the helpers in ``fedcore.data``, ``fedcore.settings`` and ``fedcore.testing``.
"""
import pluggy

__version__ = "0.1.0"

hookimpl = pluggy.HookimplMarker("fedcore")

from fedcore import plugins  # noqa: E402
from fedcore.engine.network import Channel, Ledger  # noqa: E402
from fedcore.errors import (  # noqa: E402
    BrokenPluginError,
    ConfigError,
    FedcoreError,
    InvalidUpdateError,
    MissingSlotError,
    PluginConflictError,
    SlotConflictError,
    UnknownComponentError,
)
from fedcore.pipeline import Pipeline  # noqa: E402
from fedcore.plugins import get, list_components, list_plugins  # noqa: E402
from fedcore.recipes import Recipe, recipe  # noqa: E402
from fedcore.stash import Stash, StashKey  # noqa: E402
from fedcore.types import (  # noqa: E402
    AggregateResult,
    ClientData,
    ClientInfo,
    ClientState,
    ClientUpdate,
    Partition,
    ServerState,
    Share,
)

__all__ = [
    "AggregateResult", "BrokenPluginError", "Channel", "ClientData", "ClientInfo", "ClientState", "ClientUpdate",
    "ConfigError", "FedcoreError", "InvalidUpdateError", "Ledger", "MissingSlotError", "Partition", "Pipeline",
    "PluginConflictError", "Recipe", "ServerState", "Share", "SlotConflictError", "Stash", "StashKey", "UnknownComponentError",
    "__version__", "get", "hookimpl", "list_components", "list_plugins", "plugins", "recipe",
]
