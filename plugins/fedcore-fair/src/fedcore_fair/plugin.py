"""Entry point ``fair`` (group ``fedcore``): registers q-FFL's components and recipe. Imports classes only."""
from typing import Any

import fedcore
from fedcore_fair.qffl import QFedAvg, QFFLLoss
from fedcore_fair.recipes import RECIPES


@fedcore.hookimpl
def fedcore_register_components(registry: Any) -> None:  # fedcore's registry type is not public API
    registry.add("qffl", QFedAvg)
    registry.add("qffl-loss", QFFLLoss)
    for name, recipe in RECIPES.items():
        registry.add_recipe(name, recipe)
