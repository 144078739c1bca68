"""Entry point ``fedv`` (group ``fedcore``): registers FedV, FedVZ and the paired test split.

Imports classes only, does no work. The split-learning baselines (``sl``, ``splitfed-v1``, ``splitfed-v2``)
and ``split-eval`` live in the core (``fedcore_split``) and are registered by its built-in plugin.
"""
import fedcore
from fedcore_fedv.fedv import FedV, FedVZ
from fedcore_fedv.paired import PairedTest


@fedcore.hookimpl
def fedcore_register_components(registry):
    registry.add("fedv", FedV)
    registry.add("fedvz", FedVZ)
    registry.add("paired-test", PairedTest)
