"""Entry point ``lora`` (group ``fedcore``): registers the ``lora-share`` split. Imports classes only."""
import fedcore
from fedcore_lora.share import LoRAShare


@fedcore.hookimpl
def fedcore_register_components(registry):
    registry.add("lora-share", LoRAShare)
