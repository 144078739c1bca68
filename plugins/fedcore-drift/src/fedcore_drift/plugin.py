"""Entry point ``drift`` (group ``fedcore``): registers the drift-correction components and recipes (classes only)."""
from typing import Any

import fedcore
from fedcore_drift.feddyn import FedDynAggregate, FedDynUpdate
from fedcore_drift.fednova import FedNovaAggregate, FedNovaUpdate
from fedcore_drift.recipes import RECIPES
from fedcore_drift.scaffold import ScaffoldAggregate, ScaffoldUpdate


@fedcore.hookimpl
def fedcore_register_components(registry: Any) -> None:  # fedcore's registry type is not public API
    registry.add("scaffold-sgd", ScaffoldUpdate)
    registry.add("scaffold", ScaffoldAggregate)
    registry.add("fednova-sgd", FedNovaUpdate)
    registry.add("fednova", FedNovaAggregate)
    registry.add("feddyn-sgd", FedDynUpdate)
    registry.add("feddyn", FedDynAggregate)
    for name, recipe in RECIPES.items():
        registry.add_recipe(name, recipe)
