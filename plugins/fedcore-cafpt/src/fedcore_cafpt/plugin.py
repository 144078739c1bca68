"""Entry point ``cafpt`` (group ``fedcore``): registers the selector, its recipe and the ``[label_noise]`` config
table. Imports classes only."""
import fedcore
from fedcore_cafpt.label_noise import LABEL_NOISE_TABLE
from fedcore_cafpt.recipes import CAFPT
from fedcore_cafpt.select import CaFPT


@fedcore.hookimpl
def fedcore_register_components(registry):
    registry.add("cafpt", CaFPT)
    registry.add_recipe("cafpt", CAFPT)
    registry.add_table("label_noise", LABEL_NOISE_TABLE)
