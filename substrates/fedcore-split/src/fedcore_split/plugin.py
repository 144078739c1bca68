"""Entry point ``split`` (group ``fedcore``): registers ``split-share``, ``split-train``, ``sl-turns``,
``split-eval`` and the recipes ``sl``, ``splitfed-v1``, ``splitfed-v2``. Imports classes only."""
import fedcore
from fedcore_split.components import SLTurns, SplitShare, SplitTrain
from fedcore_split.evaluate import SplitEval
from fedcore_split.recipes import RECIPES


@fedcore.hookimpl
def fedcore_register_components(registry):
    registry.add("split-share", SplitShare)
    registry.add("split-train", SplitTrain)
    registry.add("sl-turns", SLTurns)
    registry.add("split-eval", SplitEval)
    for name, recipe in RECIPES.items():
        registry.add_recipe(name, recipe)
