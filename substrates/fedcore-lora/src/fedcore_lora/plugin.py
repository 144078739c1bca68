"""Entry point ``lora`` (group ``fedcore``): registers the ``lora-share`` split and the LoRA aggregators."""
import fedcore
from fedcore_lora.aggregators import ProductSVD, StalenessMean
from fedcore_lora.share import LoRAShare


@fedcore.hookimpl
def fedcore_register_components(registry):
    registry.add("lora-share", LoRAShare)
    registry.add("staleness-mean", StalenessMean)
    registry.add("lora-product-svd", ProductSVD)
