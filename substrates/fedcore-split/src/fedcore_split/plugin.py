"""Entry point ``split`` (group ``fedcore``): registers ``sl``, ``splitfed-v1``, ``splitfed-v2`` and ``split-eval``."""
import fedcore
import fedcore_split


@fedcore.hookimpl
def fedcore_register_components(registry):
    fedcore_split.register(registry)
