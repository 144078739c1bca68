"""Entry point ``fedgkt`` (group ``fedcore``): registers the recipe ``fedgkt`` (components: ``fedcore_distill``)."""
import fedcore
from fedcore_fedgkt.recipes import RECIPES


@fedcore.hookimpl
def fedcore_register_components(registry):
    for name, recipe in RECIPES.items():
        registry.add_recipe(name, recipe)
