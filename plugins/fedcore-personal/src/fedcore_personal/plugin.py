"""Entry point ``personal`` (group ``fedcore``): registers the components and recipes. Imports classes only."""
from typing import Any

import fedcore
from fedcore_personal.ditto import DittoUpdate
from fedcore_personal.evaluate import PersonalEval
from fedcore_personal.fedrep import FedRepUpdate
from fedcore_personal.keep import KeepPersonal
from fedcore_personal.recipes import RECIPES
from fedcore_personal.shares import FedBNShare, FedPerShare


@fedcore.hookimpl
def fedcore_register_components(registry: Any) -> None:  # fedcore's registry type is not public API
    registry.add("fedper-share", FedPerShare)
    registry.add("fedbn-share", FedBNShare)
    registry.add("keep-personal", KeepPersonal)
    registry.add("fedrep-sgd", FedRepUpdate)
    registry.add("ditto-sgd", DittoUpdate)
    registry.add("personal-eval", PersonalEval)
    for name, recipe in RECIPES.items():
        registry.add_recipe(name, recipe)
