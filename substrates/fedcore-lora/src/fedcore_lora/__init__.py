"""LoRA for fedcore: peft adapters on timm/torch models, adapter state, rank changes, LoRA shares.

    from fedcore_lora import inject_lora, set_rank, lora_share
    inject_lora(model, target=r"(qkv|proj|fc1|fc2)$", rank=12, seed=0)   # in place, server side
    resolve_lora(model, rank=None, ...)                                    # a config's [model.lora] (model_lora.py)
    set_rank(model, 8, mode="svd")                                         # between rounds
    share = lora_share(model, client.id, ctx)                              # in fedcore_split_model

Generic on purpose: SA-FedLoRA, HetLoRA-style or prompt/adapter plugins reuse these pieces.
"""
from fedcore_lora.adapters import (
    ADAPTER,
    DEFAULT_TARGETS,
    adapter_keys,
    adapter_state,
    check_rank,
    current_rank,
    factor_pairs,
    find_targets,
    has_lora,
    inject_lora,
    linear_modules,
    load_adapter_state,
    lora_layers,
    lora_numel_per_rank,
    merged_copy,
    ranks,
)
from fedcore_lora.aggregators import ProductSVD, StalenessMean
from fedcore_lora.model_lora import ResolvedLoRA, classifier_name, model_targets, resolve_lora
from fedcore_lora.rank import MODES, grow_factors, product_mean, resize_factors, set_rank, truncate_factors
from fedcore_lora.share import LoRAShare, lora_share, matching_keys, subset_share

__all__ = [
    "ADAPTER", "DEFAULT_TARGETS", "LoRAShare", "MODES", "ProductSVD", "ResolvedLoRA", "StalenessMean", "adapter_keys",
    "adapter_state", "check_rank", "classifier_name",
    "current_rank", "factor_pairs", "find_targets", "grow_factors", "has_lora", "inject_lora", "linear_modules",
    "load_adapter_state", "lora_layers", "lora_numel_per_rank", "lora_share", "matching_keys", "merged_copy",
    "model_targets", "product_mean", "ranks", "resize_factors", "resolve_lora", "set_rank", "subset_share",
    "truncate_factors",
]
