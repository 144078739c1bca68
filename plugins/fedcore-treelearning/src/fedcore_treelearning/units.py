"""Cut a model into its ordered partition units: the "layers" a Tree Learning split point falls between.

The thesis never says what a layer is (spec 003a A9.1); a unit here is the coarsest piece that still
lets a split fall between the stages of the network:

- timm ``VisionTransformer``: the stem (patch embedding, cls/register tokens, position embedding,
  pre-norm), then one unit per block, then the head (final norm, pooling, classifier);
- timm ``ResNet``: the stem (conv1, bn1, act, max-pool), ``layer1``..``layer4``, the head (pool, fc);
- timm ``EfficientNet`` / ``MobileNetV3`` (MobileNet-v1/v2/v3, EfficientNet, MnasNet, ...): the stem (conv_stem,
  bn1), one unit per stage of ``blocks``, the head (the head convolution and norm where the model has them,
  pooling, classifier);
- timm ``VGG``: one unit per conv stage of ``features`` (its convolutions up to and including a max-pool), the
  head (``pre_logits`` and the classifier);
- ``nn.Sequential``: one unit per child;
- a list/tuple/``nn.ModuleList`` of modules: taken as the units themselves.

Units share parameters with the model (no copies), so profiling or training a unit is the model's own.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch import nn

from fedcore.errors import ConfigError

SUPPORTED = ("timm VisionTransformer (cut by block)", "timm ResNet (stem, layer1-4, head)",
             "timm EfficientNet/MobileNetV3 (stem, stages, head)", "timm VGG (conv stages, head)",
             "nn.Sequential (cut by child)", "a list/tuple/nn.ModuleList of unit modules")


class ViTStem(nn.Module):
    """Patch embedding + cls/register tokens + position embedding + pre-norm of a timm ViT."""

    _vit: Any

    def __init__(self, vit: Any) -> None:
        super().__init__()
        object.__setattr__(self, "_vit", vit)  # not a submodule: the unit owns only the stem's parameters
        self.patch_embed, self.patch_drop, self.norm_pre = vit.patch_embed, vit.patch_drop, vit.norm_pre
        for name in ("cls_token", "reg_token", "pos_embed"):
            value = getattr(vit, name, None)
            if isinstance(value, nn.Parameter):
                setattr(self, name, value)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.patch_embed(x)
        x = self._vit._pos_embed(x)
        return self.norm_pre(self.patch_drop(x))


class ViTHead(nn.Module):
    """Final norm + pooling + classifier of a timm ViT."""

    _vit: Any

    def __init__(self, vit: Any) -> None:
        super().__init__()
        object.__setattr__(self, "_vit", vit)
        self.norm, self.fc_norm, self.head_drop, self.head = vit.norm, vit.fc_norm, vit.head_drop, vit.head
        if getattr(vit, "attn_pool", None) is not None:
            self.attn_pool = vit.attn_pool

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self._vit.forward_head(self.norm(x))


class ResNetStem(nn.Module):
    def __init__(self, net: Any) -> None:
        super().__init__()
        self.conv1, self.bn1, self.act1, self.maxpool = net.conv1, net.bn1, net.act1, net.maxpool

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.maxpool(self.act1(self.bn1(self.conv1(x))))


class ResNetHead(nn.Module):
    _net: Any

    def __init__(self, net: Any) -> None:
        super().__init__()
        object.__setattr__(self, "_net", net)
        self.global_pool, self.fc = net.global_pool, net.fc

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self._net.forward_head(x)


class Chain(nn.Module):
    """Some of a model's submodules, run in order (the stem of a timm CNN: ``conv_stem``, ``bn1``)."""

    def __init__(self, net: nn.Module, names: Sequence[str]) -> None:
        super().__init__()
        for name in names:
            setattr(self, name, getattr(net, name))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for module in self.children():
            x = module(x)
        return x


class ModelHead(nn.Module):
    """The modules after a timm CNN's last stage: ``before`` run in order, then the model's own ``forward_head``.

    Owns ``before`` and ``head`` (the modules ``forward_head`` uses), so their parameters belong to this unit.
    """

    _net: Any

    def __init__(self, net: nn.Module, *, before: Sequence[str] = (), head: Sequence[str]) -> None:
        super().__init__()
        object.__setattr__(self, "_net", net)
        self._before = tuple(before)
        for name in (*before, *head):
            setattr(self, name, getattr(net, name))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for name in self._before:
            x = getattr(self, name)(x)
        return self._net.forward_head(x)


def _vgg_stages(features: nn.Sequential) -> list[nn.Sequential]:
    """``features`` cut after each max-pool: VGG's conv stages (the modules are the model's own)."""
    stages: list[nn.Sequential] = []
    current: list[nn.Module] = []
    for module in features:
        current.append(module)
        if isinstance(module, nn.MaxPool2d):
            stages.append(nn.Sequential(*current))
            current = []
    if current:
        stages.append(nn.Sequential(*current))
    return stages


def _timm_cnn_units(model: nn.Module) -> tuple[tuple[str, nn.Module], ...] | None:
    """The units of timm's EfficientNet / MobileNetV3 family and of VGG; ``None`` for any other model."""
    from timm.models.efficientnet import EfficientNet
    from timm.models.mobilenetv3 import MobileNetV3
    from timm.models.vgg import VGG

    if isinstance(model, (EfficientNet, MobileNetV3)):
        stages = tuple((f"blocks.{i}", stage) for i, stage in enumerate(model.blocks))
        if isinstance(model, EfficientNet):  # conv_head and bn2 end forward_features there
            head = ModelHead(model, before=("conv_head", "bn2"), head=("global_pool", "classifier"))
        else:  # MobileNetV3 runs them after the pooling, inside forward_head
            head = ModelHead(model, head=("global_pool", "conv_head", "norm_head", "act2", "flatten", "classifier"))
        return (("stem", Chain(model, ("conv_stem", "bn1"))), *stages, ("head", head))
    if isinstance(model, VGG):
        stages = tuple((f"stage{i + 1}", stage) for i, stage in enumerate(_vgg_stages(model.features)))
        return (*stages, ("head", ModelHead(model, head=("pre_logits", "head"))))
    return None


def partition_units(model: nn.Module | Sequence[nn.Module]) -> tuple[tuple[str, nn.Module], ...]:
    """The model's partition units in forward order, each with a name (``stem``, ``blocks.0``, ..., ``head``)."""
    from timm.models.resnet import ResNet
    from timm.models.vision_transformer import VisionTransformer

    if isinstance(model, VisionTransformer):
        blocks = tuple((f"blocks.{i}", b) for i, b in enumerate(model.blocks))
        units = (("stem", ViTStem(model)), *blocks, ("head", ViTHead(model)))
    elif isinstance(model, ResNet):
        units = (("stem", ResNetStem(model)), *((f"layer{i}", getattr(model, f"layer{i}")) for i in range(1, 5)),
                 ("head", ResNetHead(model)))
    elif isinstance(model, nn.Module) and (cnn := _timm_cnn_units(model)) is not None:
        units = cnn
    elif isinstance(model, nn.Sequential):
        units = tuple((name, child) for name, child in model._modules.items() if child is not None)  # repeats kept
    elif isinstance(model, (nn.ModuleList, list, tuple)) and all(isinstance(m, nn.Module) for m in model):
        units = tuple((str(i), m) for i, m in enumerate(model))
    else:
        raise ConfigError(f"cannot cut a model of type {type(model).__module__}.{type(model).__qualname__} into "
                          f"partition units; supported: {', '.join(SUPPORTED)}")
    if isinstance(model, nn.Module):
        _check_every_parameter_in_one_unit(model, units)
    if len(units) < 2:
        raise ConfigError(f"a {type(model).__name__} with {len(units)} unit(s) cannot be split: Tree Learning needs "
                          f"at least 2 partition units (one on the client, one on the server)")
    return units


def _check_every_parameter_in_one_unit(model: nn.Module, units: tuple[tuple[str, nn.Module], ...]) -> None:
    """A variant whose extra parts the cut does not know (a new timm option) must not be profiled half."""
    owned = [id(p) for _, unit in units for p in unit.parameters()]
    missing = [name for name, p in model.named_parameters() if id(p) not in set(owned)]
    if missing or len(owned) != len(set(owned)):
        raise ConfigError(f"cannot cut this {type(model).__qualname__} into units: parameters "
                          f"{missing[:5] or 'shared between units'} belong to no unit; "
                          f"supported: {', '.join(SUPPORTED)}"
                          f" (or pass the units as a list)")
