"""``[model.lora]``: the LoRA a model is trained with, carried by the model to the components that apply it.

    model = { name = "timm", arch = "vit_small_patch16_224", pretrained = true }
    [model.lora]
    r = 8                              # peft LoraConfig names: r, alpha (lora_alpha), target_modules, dropout
    alpha = 16
    target_modules = ["qkv", "proj"]   # module names, a regex, or "all-linear"
    dropout = 0.1

The model is built as it is; the config builder attaches this record to it (:func:`attach_lora`) and the
components that inject peft adapters read it from the global model (:func:`model_lora`): ``lora-share`` at run
start, SA-FedLoRA's plan when its LoRA stage begins (its first stage trains the plain model). A component
setting that says the same thing differently (a rank, a target pattern) is refused, so the model table is
the one source. Plain data here (no peft import): the LoRA substrate turns it into a ``peft.LoraConfig``.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs
from torch import nn

from fedcore.errors import ConfigError
from fedcore.settings import setting

DEFAULT_RANK = 8
"""peft's ``LoraConfig.r`` default: the rank of a component that takes its rank from the model and none is given."""
ATTRIBUTE = "fedcore_lora"
"""The model attribute that carries the record (a plain attribute: copies and pickles of the model keep it)."""


def _targets(value: Any) -> Any:
    return tuple(value) if isinstance(value, list) else value


def _check_targets(instance: Any, attribute: Any, value: Any) -> None:
    if value is None or isinstance(value, str) and value:
        return
    if isinstance(value, tuple) and value and all(isinstance(v, str) and v for v in value):
        return
    shown = list(value) if isinstance(value, tuple) else value
    raise ConfigError(f"target_modules = {shown!r}: give module names (a list of strings), a regex string or "
                      f"\"all-linear\"")


@attrs.frozen(kw_only=True)
class LoRAConfig:
    """peft's ``LoraConfig`` settings a federated LoRA run needs; ``None`` leaves one to the applying component."""

    r: int | None = setting(None, kind=int, optional=True, low=1,
                            help="rank of the adapters (None: the component's own rank, 8 = peft's default)")
    alpha: float | None = setting(None, kind=float, optional=True, low=0.0, low_open=True,
                                  help="peft lora_alpha: scaling = alpha / r (None: alpha = r, scaling 1)")
    target_modules: str | tuple[str, ...] | None = attrs.field(
        default=None, converter=_targets, validator=_check_targets,
        metadata={"help": "nn.Linear modules to adapt, as peft reads them: names (each matches a module's name or "
                          "its last parts, e.g. \"qkv\"), a regex string matched against the whole name, or "
                          "\"all-linear\" (every nn.Linear but the classifier); None: the component's default"})
    dropout: float = setting(0.0, low=0.0, high=1.0, high_open=True, help="peft lora_dropout before the A factor")

    @classmethod
    def from_table(cls, table: Any, where: str = "model.lora") -> LoRAConfig:
        """The record from a config table; a wrong key or value is one ConfigError line naming it."""
        if not isinstance(table, Mapping):
            raise ConfigError(f"{where} = {table!r} must be a table ([model.lora] or lora = {{ r = 8, ... }})")
        allowed = [f.name for f in attrs.fields(cls)]
        unknown = [k for k in table if k not in allowed]
        if unknown:
            raise ConfigError(f"{where}: unknown setting {unknown[0]!r}; allowed: {', '.join(allowed)}")
        try:
            return cls(**dict(table))
        except ConfigError as exc:
            raise ConfigError(f"{where}: {str(exc).removeprefix('LoRAConfig.')}") from None

    def as_table(self) -> dict[str, Any]:
        """The settings given, as TOML values (what the resolved config and the fingerprint hold)."""
        out = {f.name: getattr(self, f.name) for f in attrs.fields(type(self)) if getattr(self, f.name) is not None}
        if isinstance(out.get("target_modules"), tuple):
            out["target_modules"] = list(out["target_modules"])
        return out


def attach_lora(model: nn.Module, config: LoRAConfig) -> nn.Module:
    """Give ``model`` the LoRA it is to be trained with (in place); returns the model."""
    setattr(model, ATTRIBUTE, config)  # nn.Module stores a non-tensor, non-module value as a plain attribute
    return model


def model_lora(model: nn.Module) -> LoRAConfig | None:
    """The LoRA ``model`` carries (``[model.lora]`` of its config), or None."""
    config = getattr(model, ATTRIBUTE, None)
    return config if isinstance(config, LoRAConfig) else None


def applies_model_lora(component: Any) -> bool:
    """Whether a pipeline component injects the adapters a model's ``[model.lora]`` asks for (it declares
    ``applies_model_lora = True``); a config with ``[model.lora]`` and no such component is refused."""
    return bool(getattr(type(component), "applies_model_lora", False))
