"""Inject LoRA adapters into a torch/timm model with peft, and read or write their state.

peft's ``inject_adapter_in_model`` works on any ``nn.Module`` (timm ViT and Swin included) when the
target modules are named explicitly. We resolve the user's regex to an explicit list of
``nn.Linear`` module names first, so that a pattern that matches nothing, a model without the
named layers, or a rank above a layer's dimensions fails with an error that names the setting and
what the model holds -- before peft touches the model.

Parameterisation follows SA-FedLoRA's Eq. 6 by default: ``ΔW = B A`` with scaling 1
(``lora_alpha = r``), ``B = 0`` and ``A ~ N(0, std²)`` with ``std = 1/r`` (peft's ``"gaussian"``).
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
import re
from typing import Any

import torch
from torch import nn

from fedcore.errors import ConfigError

ADAPTER = "default"
DEFAULT_TARGETS = r"(qkv|proj|fc1|fc2)$"
"""Every linear layer of a timm ViT/Swin block: attention qkv and projection, MLP fc1 and fc2."""


def linear_modules(model: nn.Module) -> dict[str, nn.Linear]:
    """The model's ``nn.Linear`` modules by qualified name (layers peft already wrapped count by their own name)."""
    from peft.tuners.lora.layer import LoraLayer

    out: dict[str, nn.Linear] = {}
    for name, module in model.named_modules():
        if isinstance(module, LoraLayer):
            base = module.get_base_layer()
            if isinstance(base, nn.Linear):
                out[name] = base
        elif isinstance(module, nn.Linear) and not _inside_lora(name):
            out[name] = module
    return out


def _inside_lora(name: str) -> bool:
    parts = name.split(".")
    return any(p in ("lora_A", "lora_B", "base_layer") for p in parts)


def find_targets(model: nn.Module, pattern: str, *, setting: str = "target") -> list[str]:
    """Names of the ``nn.Linear`` modules whose qualified name matches ``pattern`` (``re.search``).

    Raises :class:`ConfigError` naming ``setting``, the pattern and the linear layers the model has.
    """
    try:
        regex = re.compile(pattern)
    except re.error as exc:
        raise ConfigError(f"{setting}={pattern!r} is not a valid regular expression: {exc}") from None
    linears = linear_modules(model)
    hits = [n for n in linears if regex.search(n)]
    if not hits:
        shown = ", ".join(list(linears)[:12]) + (f", ... ({len(linears)} in all)" if len(linears) > 12 else "")
        raise ConfigError(f"{setting}={pattern!r} matches no nn.Linear module of this {type(model).__name__}; "
                          f"its linear layers are: {shown or '(none)'}")
    return hits


def lora_layers(model: nn.Module) -> dict[str, Any]:
    """The peft LoRA layers of ``model`` that carry the adapter, by qualified name.

    Typed ``Any``: peft's ``LoraLayer`` is a mixin whose ``lora_A``/``lora_B``/``r``/``scaling`` are per-adapter
    dicts of modules and numbers that its annotations do not describe.
    """
    from peft.tuners.lora.layer import LoraLayer

    return {n: m for n, m in model.named_modules() if isinstance(m, LoraLayer) and ADAPTER in m.lora_A}


def has_lora(model: nn.Module) -> bool:
    return bool(lora_layers(model))


def current_rank(model: nn.Module) -> int:
    """The rank shared by every adapter of ``model``; an error if there are none or they differ."""
    ranks = {int(m.r[ADAPTER]) for m in lora_layers(model).values()}
    if not ranks:
        raise ValueError(f"this {type(model).__name__} has no LoRA adapters")
    if len(ranks) > 1:
        raise ValueError(f"the adapters have different ranks {sorted(ranks)}; use ranks(model)")
    return ranks.pop()


def ranks(model: nn.Module) -> dict[str, int]:
    return {n: int(m.r[ADAPTER]) for n, m in lora_layers(model).items()}


def check_rank(model: nn.Module, targets: list[str], rank: int, *, setting: str = "rank") -> None:
    """Every target must have ``rank <= min(in_features, out_features)``; the error names the first that does not."""
    if rank < 1:
        raise ConfigError(f"{setting}={rank}; a LoRA rank must be >= 1")
    linears = linear_modules(model)
    for name in targets:
        layer = linears[name]
        limit = min(layer.in_features, layer.out_features)
        if rank > limit:
            raise ConfigError(f"{setting}={rank} exceeds min(in_features, out_features)={limit} of layer {name!r} "
                              f"({layer.in_features}->{layer.out_features})")


def inject_lora(model: nn.Module, *, target: str | Sequence[str] = DEFAULT_TARGETS, rank: int = 8,
                init_std: float | None = None, seed: int = 0, alpha: float | None = None,
                dropout: float = 0.0) -> list[str]:
    """Add LoRA adapters of ``rank`` to every ``nn.Linear`` matching ``target``, in place; returns their names.

    ``target`` is a regex over the qualified module names (``re.search``) or the module names themselves (as
    :func:`fedcore_lora.model_targets` resolves a model's ``[model.lora]``). Every other parameter of ``model``
    is frozen (peft's convention): the caller re-enables what its method trains (a head, say). ``A`` is drawn
    from a ``torch`` stream seeded with ``seed`` without touching the global RNG, so the server can initialise
    the global adapters once and broadcast them (SA-FedLoRA Alg. 2 l.2). ``alpha=None`` gives scaling 1
    (``lora_alpha = rank``); ``dropout`` is peft's ``lora_dropout``.
    """
    from peft import LoraConfig, inject_adapter_in_model

    if has_lora(model):
        raise ValueError("the model already has LoRA adapters; use set_rank() to change their rank")
    if isinstance(target, str):
        targets = find_targets(model, target, setting="target")
    else:
        targets = list(target)
        unknown = sorted(set(targets) - set(linear_modules(model)))
        if unknown or not targets:
            raise ConfigError(f"target={unknown or targets!r}: not nn.Linear modules of this {type(model).__name__}")
    check_rank(model, targets, rank)
    # peft annotates lora_alpha as int but uses it as a float (scaling = lora_alpha / r)
    config = LoraConfig(r=rank, lora_alpha=rank if alpha is None else alpha,  # type: ignore[arg-type]
                        target_modules=targets,
                        init_lora_weights="gaussian", lora_dropout=dropout, bias="none")
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        inject_adapter_in_model(config, model)
        if init_std is not None:
            with torch.no_grad():
                for layer in lora_layers(model).values():
                    layer.lora_A[ADAPTER].weight.normal_(0.0, init_std)
    return targets


def adapter_keys(model: nn.Module) -> list[str]:
    """``state_dict`` names of every ``lora_A`` / ``lora_B`` factor, in model order."""
    return [k for k in model.state_dict() if f".lora_A.{ADAPTER}." in k or f".lora_B.{ADAPTER}." in k]


def adapter_state(model: nn.Module) -> dict[str, torch.Tensor]:
    """Detached copies of the adapter factors."""
    state = model.state_dict()
    return {k: state[k].detach().clone() for k in adapter_keys(model)}


def load_adapter_state(model: nn.Module, state: Mapping[str, torch.Tensor]) -> None:
    """Copy adapter factors into ``model`` (same ranks; resize first with :func:`set_rank`)."""
    own = model.state_dict()
    unknown = sorted(set(state) - set(adapter_keys(model)))
    if unknown:
        raise KeyError(f"not adapter entries of this model: {unknown[:6]}")
    with torch.no_grad():
        for k, v in state.items():
            if own[k].shape != v.shape:
                raise ValueError(f"adapter entry {k!r} has shape {tuple(v.shape)}, the model has "
                                 f"{tuple(own[k].shape)}; call set_rank() first")
            own[k].copy_(v)


def factor_pairs(keys: list[str] | Mapping[str, torch.Tensor]) -> dict[str, tuple[str, str]]:
    """Layer name -> (B key, A key) for every adapter in ``keys``."""
    names = list(keys)
    out: dict[str, tuple[str, str]] = {}
    for k in names:
        if f".lora_A.{ADAPTER}." in k:
            layer = k.split(f".lora_A.{ADAPTER}.")[0]
            b = k.replace(f".lora_A.{ADAPTER}.", f".lora_B.{ADAPTER}.")
            if b not in names:
                raise KeyError(f"adapter {layer!r} has an A factor but no B factor")
            out[layer] = (b, k)
    return out


def lora_numel_per_rank(model: nn.Module) -> int:
    """Σ (d_in + d_out) over the adapted layers: the adapter parameters per unit of rank."""
    return sum(m.get_base_layer().in_features + m.get_base_layer().out_features for m in lora_layers(model).values())


def merged_copy(model: nn.Module) -> nn.Module:
    """A copy of ``model`` with ``W + scaling·B A`` folded into each base layer and the adapters removed.

    The LoRA deployment path: no extra latency at inference.
    """
    import copy

    out = copy.deepcopy(model)
    for name, layer in lora_layers(out).items():
        base = layer.get_base_layer()
        with torch.no_grad():
            delta = layer.lora_B[ADAPTER].weight @ layer.lora_A[ADAPTER].weight
            base.weight += layer.scaling[ADAPTER] * delta.to(base.weight.dtype)
        parent_name, _, child = name.rpartition(".")
        parent = out.get_submodule(parent_name) if parent_name else out
        setattr(parent, child, base)
    return out
