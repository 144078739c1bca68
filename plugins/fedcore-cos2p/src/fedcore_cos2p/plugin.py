"""Entry point ``cos2p`` (group ``fedcore``): registers the components and recipes. Imports classes only."""
import fedcore
from fedcore_cos2p.aggregate import Cos2pAggregate
from fedcore_cos2p.partition import QuotaDirichletPartition
from fedcore_cos2p.recipes import RECIPES
from fedcore_cos2p.share import Cos2pShare
from fedcore_cos2p.update import Cos2pUpdate


@fedcore.hookimpl
def fedcore_register_components(registry):
    registry.add("cos2p-share", Cos2pShare)
    registry.add("cos2p-update", Cos2pUpdate)
    registry.add("cos2p-aggregate", Cos2pAggregate)
    registry.add("cos2p-quotas", QuotaDirichletPartition)
    for name, recipe in RECIPES.items():
        registry.add_recipe(name, recipe)
