"""Entry point ``pruning`` (group ``fedcore``): registers ``submodel-share``, ``submodel-train`` and
``masked-delta``. The recipes built on them (``fedrolex``, ``heterofl``) live in their own plugins."""
import fedcore
from fedcore_pruning.aggregator import MaskedDelta
from fedcore_pruning.share import SubmodelShare
from fedcore_pruning.train import SubmodelTrain


@fedcore.hookimpl
def fedcore_register_components(registry):
    registry.add("submodel-share", SubmodelShare)
    registry.add("submodel-train", SubmodelTrain)
    registry.add("masked-delta", MaskedDelta)
