"""Entry point ``fedvkd`` (group ``fedcore``): registers the recipes ``fedvkd``, ``fedavg-vit``, ``fedavg-cnn`` and
``fedavg-edge``. The components are the ``fedcore_distill`` substrate's."""
import fedcore
from fedcore_fedvkd.recipes import RECIPES


@fedcore.hookimpl
def fedcore_register_components(registry):
    for name, recipe in RECIPES.items():
        registry.add_recipe(name, recipe)
