"""Entry point ``robust`` (group ``fedcore``): registers the components and recipes. Imports classes, does no work."""
from typing import Any

import fedcore
from fedcore_robust.aggregators import CoordinateMedian, TrimmedMean
from fedcore_robust.attacks import Byzantine, LabelFlipSGD
from fedcore_robust.bulyan import Bulyan
from fedcore_robust.centred_clipping import CentredClipping
from fedcore_robust.krum import Krum, MultiKrum
from fedcore_robust.recipes import RECIPES


@fedcore.hookimpl
def fedcore_register_components(registry: Any) -> None:  # fedcore's registry type is not public API
    registry.add("trimmed-mean", TrimmedMean)
    registry.add("median", CoordinateMedian)
    registry.add("krum", Krum)
    registry.add("multi-krum", MultiKrum)
    registry.add("bulyan", Bulyan)
    registry.add("centred-clipping", CentredClipping)
    registry.add("byzantine", Byzantine)
    registry.add("label-flip-sgd", LabelFlipSGD)
    for name, recipe in RECIPES.items():
        registry.add_recipe(name, recipe)
