"""Entry point ``dp`` (group ``fedcore``): registers the components and recipes. Imports classes only, does no work."""
from typing import Any

import fedcore
from fedcore_dp.dp_fedavg import DPFedAvg
from fedcore_dp.dp_sgd import DPSGDUpdate
from fedcore_dp.recipes import RECIPES


@fedcore.hookimpl
def fedcore_register_components(registry: Any) -> None:  # fedcore's registry type is not public API
    registry.add("dp-fedavg", DPFedAvg, help="DP-FedAvg: client clipping, Gaussian noise, privacy accounting")
    registry.add("dp-sgd", DPSGDUpdate, help="local DP-SGD through Opacus: per-sample clipping and noise")
    for name, recipe in RECIPES.items():
        registry.add_recipe(name, recipe)
