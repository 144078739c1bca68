"""Entry point ``secagg`` (group ``fedcore``): registers the component and recipes. Imports classes only."""
from typing import Any

import fedcore
from fedcore_secagg.recipes import RECIPES
from fedcore_secagg.secagg import SecAggPlus


@fedcore.hookimpl
def fedcore_register_components(registry: Any) -> None:  # fedcore's registry type is not public API
    registry.add("secagg", SecAggPlus, help="SecAgg+: pairwise masks, Shamir shares, the server sees only the sum")
    for name, recipe in RECIPES.items():
        registry.add_recipe(name, recipe)
