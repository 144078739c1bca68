"""Entry point ``distill`` (group ``fedcore``): registers ``edge-share``, ``edge-kd-train``, ``kd-server``,
``kd-eval``, ``p-group``, the ``kd.*`` models and the ``kd.synth-patterns`` data set."""
import fedcore
import fedcore_distill


@fedcore.hookimpl
def fedcore_register_components(registry):
    fedcore_distill.register(registry)
