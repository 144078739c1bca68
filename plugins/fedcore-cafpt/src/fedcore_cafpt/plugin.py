"""Entry point ``cafpt`` (group ``fedcore``): registers the selector and its recipe. Imports classes only."""
import fedcore
from fedcore_cafpt.recipes import CAFPT
from fedcore_cafpt.select import CaFPT


@fedcore.hookimpl
def fedcore_register_components(registry):
    registry.add("cafpt", CaFPT)
    registry.add_recipe("cafpt", CAFPT)
