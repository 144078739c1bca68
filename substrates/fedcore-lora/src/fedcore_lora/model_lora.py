"""A model's ``[model.lora]`` read by the components that inject adapters, merged with their own settings.

The model table is the one source of what LoRA a model is trained with (``fedcore.models.LoRAConfig``: r, alpha,
target_modules, dropout). A component that injects adapters (``lora-share``, SA-FedLoRA's plan) also has a rank
and a target pattern of its own, for Python users and older configs: :func:`resolve_lora` takes the model's
value where the component's is unset (or is the component's default pattern), and refuses, in one line, a
component value that says something else than the model's. Target modules are read as peft reads
``LoraConfig.target_modules`` (:func:`model_targets`).
"""
from __future__ import annotations

from collections.abc import Sequence

import attrs
from torch import nn

from fedcore.errors import ConfigError
from fedcore.models import LoRAConfig, model_lora
from fedcore_lora.adapters import DEFAULT_TARGETS, find_targets, linear_modules

ALL_LINEAR = "all-linear"
DEFAULT_RANK = 8
"""peft's ``LoraConfig.r`` default: the rank when neither the model nor the component gives one."""


@attrs.frozen(kw_only=True)
class ResolvedLoRA:
    """What to inject: the rank, the ``nn.Linear`` module names, peft's alpha and dropout."""

    rank: int
    targets: tuple[str, ...]
    alpha: float | None = None
    dropout: float = 0.0


def classifier_name(model: nn.Module) -> str | None:
    """The qualified name of a timm model's classifier (``get_classifier()``), or None."""
    get = getattr(model, "get_classifier", None)
    head = get() if callable(get) else None
    if not isinstance(head, nn.Module):
        return None
    return next((name for name, module in model.named_modules() if module is head), None)


def model_targets(model: nn.Module, target_modules: str | Sequence[str], *,
                  setting: str = "model.lora.target_modules") -> list[str]:
    """The ``nn.Linear`` names ``target_modules`` selects, as peft reads ``LoraConfig.target_modules``: a list
    names modules (a module matches a name equal to its qualified name or to its last dotted parts: ``"qkv"``
    matches ``blocks.0.attn.qkv``), a string is a regex matched against the whole qualified name, and
    ``"all-linear"`` is every ``nn.Linear`` but the classifier. Matching nothing is one line listing what there is.
    """
    from peft import LoraConfig
    from peft.tuners.tuners_utils import check_target_module_exists

    linears = list(linear_modules(model))
    if isinstance(target_modules, str) and target_modules.lower() == ALL_LINEAR:
        head = classifier_name(model)
        hits = [name for name in linears if name != head]
    else:
        wanted = target_modules if isinstance(target_modules, str) else list(target_modules)
        config = LoraConfig(target_modules=wanted)
        hits = [name for name in linears if check_target_module_exists(config, name)]
    if not hits:
        shown = ", ".join(linears[:12]) + (f", ... ({len(linears)} in all)" if len(linears) > 12 else "")
        given = target_modules if isinstance(target_modules, str) else list(target_modules)
        raise ConfigError(f"{setting} = {given!r} matches no nn.Linear module of this {type(model).__name__}; its "
                          f"linear layers are: {shown or '(none)'}")
    return hits


def resolve_lora(model: nn.Module, *, rank: int | None, rank_setting: str, target: str | None,
                 target_setting: str, hint: str = "") -> ResolvedLoRA:
    """The LoRA to inject into ``model``: its ``[model.lora]`` merged with a component's ``rank`` and ``target``
    (a regex; ``None`` or :data:`DEFAULT_TARGETS` defer to the model). A rank or target set in both places and
    disagreeing is one ConfigError line (``hint`` says how the component reads the rank)."""
    lora = model_lora(model) or LoRAConfig()
    if lora.r is not None and rank is not None and rank != lora.r:
        raise ConfigError(f"model.lora.r = {lora.r} and {rank_setting} = {rank} disagree; give the rank in one "
                          f"place{f' ({hint})' if hint else ''}")
    resolved_rank = lora.r if lora.r is not None else rank if rank is not None else DEFAULT_RANK
    own = find_targets(model, target, setting=target_setting) if target not in (None, DEFAULT_TARGETS) else None
    if lora.target_modules is not None:
        targets = model_targets(model, lora.target_modules)
        if own is not None and set(own) != set(targets):
            given = lora.target_modules if isinstance(lora.target_modules, str) else list(lora.target_modules)
            raise ConfigError(f"model.lora.target_modules = {given!r} and {target_setting} = {target!r} select "
                              f"different layers ({len(targets)} and {len(own)}); give the target modules in one "
                              f"place (model.lora)")
    else:
        targets = own if own is not None else find_targets(model, DEFAULT_TARGETS, setting=target_setting)
    return ResolvedLoRA(rank=resolved_rank, targets=tuple(targets), alpha=lora.alpha, dropout=lora.dropout)
