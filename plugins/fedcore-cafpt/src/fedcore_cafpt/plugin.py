"""Entry point ``cafpt`` (group ``fedcore``): registers the selector. Imports classes only."""
import fedcore
from fedcore_cafpt.select import CaFPT


@fedcore.hookimpl
def fedcore_register_components(registry):
    registry.add("cafpt", CaFPT)
