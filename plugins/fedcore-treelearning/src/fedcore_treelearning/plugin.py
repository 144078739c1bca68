"""Entry point ``treelearning`` (group ``fedcore``): registers ``tl-share``, ``tl-cohort``, ``tl-eval``,
``tl-vertical`` and the recipes ``tree-learning``, ``tl-optimal-split``, ``tl-no-partition``, ``sl-sync``,
``sl-round-robin``, ``tree-learning-vertical``; the thesis's CIFAR MobileNet v1 as the model ``tl.mobilenet``
(width x0.25 by default; ``width = 1.0`` is the thesis's Tab. 3.2 model). Imports classes only, does no work."""
import fedcore
from fedcore_treelearning.cifar_models import mobilenet_v1
from fedcore_treelearning.cohort import TreeCohort
from fedcore_treelearning.evaluate import TreeEval
from fedcore_treelearning.recipes import RECIPES
from fedcore_treelearning.share import TreeShare
from fedcore_treelearning.vertical import VerticalPartition


@fedcore.hookimpl
def fedcore_register_components(registry):
    registry.add("tl-share", TreeShare)
    registry.add("tl-cohort", TreeCohort)
    registry.add("tl-eval", TreeEval)
    registry.add("tl-vertical", VerticalPartition)
    registry.add_model("tl.mobilenet", mobilenet_v1,
                       help="the thesis's CIFAR MobileNet v1 cut into 7 units (width x0.25)")
    for name, recipe in RECIPES.items():
        registry.add_recipe(name, recipe)
