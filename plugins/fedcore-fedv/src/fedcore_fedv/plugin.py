"""Entry point ``fedv`` (group ``fedcore``): registers ``fedv-share``, ``fedv-train``, ``paired-test``,
``local-model-eval`` and the
recipes ``fedv`` and ``fedvz``.

Imports classes only, does no work. The split-learning baselines (recipes ``sl``, ``splitfed-v1``,
``splitfed-v2``) and ``split-eval`` live in the ``fedcore_split`` substrate and are registered by its plugin.
"""
import fedcore
from fedcore_fedv.fedv import RECIPES
from fedcore_fedv.local_eval import LocalModelEval
from fedcore_fedv.paired import PairedTest
from fedcore_fedv.share import FedVShare
from fedcore_fedv.train import FedVTrain


@fedcore.hookimpl
def fedcore_register_components(registry):
    registry.add("fedv-share", FedVShare)
    registry.add("fedv-train", FedVTrain)
    registry.add("paired-test", PairedTest)
    registry.add("local-model-eval", LocalModelEval)
    for name, recipe in RECIPES.items():
        registry.add_recipe(name, recipe)
