"""Entry point ``fedv`` (group ``fedcore``): registers FedV, FedVZ, the paired test split and the split baselines.

Imports classes only, does no work. The split-learning baselines (``sl``, ``splitfed-v1``, ``splitfed-v2``)
and ``split-eval`` live in the core (``fedcore.split``); they are registered here until the core's
built-in plugin lists them.
"""
import fedcore
import fedcore.split
from fedcore_fedv.fedv import FedV, FedVZ
from fedcore_fedv.paired import PairedTest


@fedcore.hookimpl
def fedcore_register_components(registry):
    registry.add("fedv", FedV)
    registry.add("fedvz", FedVZ)
    registry.add("paired-test", PairedTest)
    fedcore.split.register(registry)
