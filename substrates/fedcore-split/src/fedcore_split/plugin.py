"""Entry point ``split`` (group ``fedcore``): registers ``split-share``, ``split-train``, ``sl-turns``,
``split-eval`` and the recipes ``sl``, ``splitfed-v1``, ``splitfed-v2``."""
import fedcore
import fedcore_split


@fedcore.hookimpl
def fedcore_register_components(registry):
    fedcore_split.register(registry)
