"""fedcore: collaborative training of pre-trained models across heterogeneous edge clients.

``__all__`` here and in each public submodule is the public API: the names plugins may import.
``docs/plugins.md`` ("The public API") lists the same names, and a test keeps the two in step.
"""
__version__ = "0.1.1"

from fedcore import _collector  # noqa: E402  (the standard library only)

with _collector.frozen_imports(_collector.command_process()):  # these bring torch in: fedcore/_collector.py
    from fedcore import _moved  # noqa: E402
    from fedcore.markers import hookimpl  # noqa: E402  (a leaf module: import it first)

    _moved.install()  # old import paths of code that left the core (fedcore.split, fedcore.lora, ...), until 1.0

    from fedcore import plugins  # noqa: E402
    from fedcore.contexts import RoundContext, RunContext  # noqa: E402
    from fedcore.errors import (  # noqa: E402
        BrokenPluginError,
        ConfigError,
        FedcoreError,
        MissingSlotError,
        PluginConflictError,
        SlotConflictError,
        UnknownComponentError,
    )
    from fedcore.network import Channel, Ledger, Transfer  # noqa: E402
    from fedcore.pipeline import Pipeline  # noqa: E402
    from fedcore.plugins import get, list_components, list_plugins  # noqa: E402
    from fedcore.recipes import Recipe, recipe  # noqa: E402
    from fedcore.stash import Stash, StashKey  # noqa: E402
    from fedcore.types import (  # noqa: E402
        AggregateResult,
        ClientData,
        ClientFailed,
        ClientInfo,
        ClientState,
        ClientUpdate,
        DropUpdate,
        Partition,
        ServerState,
        Share,
    )

__all__ = [
    "AggregateResult", "BrokenPluginError", "Channel", "ClientData", "ClientFailed", "ClientInfo", "ClientState",
    "ClientUpdate",
    "ConfigError", "DropUpdate", "FedcoreError", "Ledger", "MissingSlotError", "Partition", "Pipeline",
    "PluginConflictError", "Recipe", "RoundContext", "RunContext", "ServerState", "Share", "SlotConflictError", "Stash",
    "StashKey", "Transfer", "UnknownComponentError",
    "__version__", "get", "hookimpl", "list_components", "list_plugins", "plugins", "recipe",
]


def __getattr__(name: str) -> object:  # names removed in 0.1.1 keep working, with a warning, until 1.0
    if name not in ("InvalidUpdateError",):
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from fedcore._deprecated import removed_attribute

    return removed_attribute(__name__, name)
