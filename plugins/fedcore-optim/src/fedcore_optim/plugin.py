"""Entry point ``optim`` (group ``fedcore``): registers the server optimisers and their recipes (classes only)."""
from typing import Any

import fedcore
from fedcore_optim.optimizers import FedAdagrad, FedAdam, FedAvgM, FedYogi
from fedcore_optim.recipes import RECIPES


@fedcore.hookimpl
def fedcore_register_components(registry: Any) -> None:  # fedcore's registry type is not public API
    registry.add("fedavgm", FedAvgM)
    registry.add("fedadam", FedAdam)
    registry.add("fedyogi", FedYogi)
    registry.add("fedadagrad", FedAdagrad)
    for name, recipe in RECIPES.items():
        registry.add_recipe(name, recipe)
