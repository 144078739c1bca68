"""Turning stored images into model inputs, one batch at a time: resize, channels, normalise.

A dataset keeps its images compact (uint8 at the resolution they were stored in) and a transform makes
model inputs of each batch where batches are made: CIFAR-10 at 224x224 in float32 is 30 GB, as uint8 at
32x32 it is 150 MB. The transform is bound after the model is built, because the model says what it
wants (:func:`model_input_config`):

* a model (or any module inside it) with a ``fedcore_input_config`` mapping declares it itself, in timm's
  data-config keys (``input_size``, ``mean``, ``std``, ``interpolation``). fedcore-clip's ``ImagePrep``
  does: CLIP models normalise inside, so they ask for [0, 1] images at their size;
* else a timm model (a module with a ``pretrained_cfg``) gets ``timm.data.resolve_model_data_config``,
  with the input size and channels the model was really built with (``img_size=32`` on a ViT, ``in_chans``);
* else (micro models) nothing: images are scaled to [0, 1] and left at their size.

The dataset's own settings (``size``, ``mean``, ``std``) override the model's; ``transform = "none"`` means
[0, 1] only.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
import math
from typing import Any

import attrs
import torch
from torch import nn
import torch.nn.functional as F

from fedcore.errors import ConfigError

MODES = ("auto", "none")
INTERPOLATIONS = ("bilinear", "bicubic", "nearest")
LUMA = (0.299, 0.587, 0.114)
"""ITU-R 601-2 weights, what PIL's ``convert("L")`` uses, for a three-channel image given to a one-channel model."""


def _pair(value: Any) -> tuple[int, int] | None:
    if value is None:
        return None
    pair = (value, value) if isinstance(value, int) and not isinstance(value, bool) else tuple(value)
    if len(pair) != 2 or not all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in pair):
        raise ConfigError(f"size={value!r}; expected a positive integer or [height, width]")
    return (int(pair[0]), int(pair[1]))


def _floats(value: Any) -> tuple[float, ...] | None:
    if value is None:
        return None
    values = (value,) if isinstance(value, (int, float)) and not isinstance(value, bool) else tuple(value)
    if len(values) not in (1, 3) or not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values):
        raise ConfigError(f"{value!r}; expected a number or a list of 1 or 3 numbers (one per channel)")
    return tuple(float(v) for v in values)


@attrs.frozen(kw_only=True)
class ImageTransform:
    """Stored images (uint8 in 0..255, or floats already in [0, 1]) to model inputs.

    Steps, each only when set: channels (one repeated to three, or three to luminance), resize so the image
    covers ``size`` keeping its aspect ratio, then a centre crop to ``size`` (a square image is simply
    resized; the rule of the ``image-folder`` loader and of timm's eval transform at ``crop_pct = 1``),
    values clamped to [0, 1], then ``(x - mean) / std`` per channel.
    """

    size: tuple[int, int] | None = attrs.field(default=None, converter=_pair)
    mean: tuple[float, ...] | None = attrs.field(default=None, converter=_floats)
    std: tuple[float, ...] | None = attrs.field(default=None, converter=_floats)
    channels: int | None = None
    interpolation: str = "bilinear"

    def __attrs_post_init__(self) -> None:
        if self.std is not None and any(s <= 0 for s in self.std):
            raise ConfigError(f"std={list(self.std)}; every value must be > 0")
        if (self.mean is None) != (self.std is None):
            raise ConfigError("mean and std go together: give both or neither")
        if self.interpolation not in INTERPOLATIONS:
            raise ConfigError(f"interpolation={self.interpolation!r}; choose one of: {', '.join(INTERPOLATIONS)}")
        if self.channels not in (None, 1, 3):
            raise ConfigError(f"channels={self.channels!r}; must be 1 or 3")

    def __call__(self, images: torch.Tensor | Sequence[torch.Tensor]) -> torch.Tensor:
        """A float32 batch ``(n, c, h, w)`` from a stored batch, or from a list of images of different sizes."""
        if isinstance(images, torch.Tensor):
            return self._batch(images)
        sizes = {tuple(im.shape[-2:]) for im in images}
        if len(sizes) > 1 and self.size is None:
            shown = " and ".join("x".join(map(str, s)) for s in sorted(sizes)[:2])
            raise ConfigError(f"the images differ in size ({shown}, ...) and no size is set to bring them to one: "
                              f"set the dataset's size, or use a model whose pretrained config gives one")
        if not images:
            raise ValueError("an empty batch of images")
        return torch.cat([self._batch(im.unsqueeze(0)) for im in images])

    def _batch(self, x: torch.Tensor) -> torch.Tensor:
        if x.ndim == 3:  # (n, h, w): one channel
            x = x.unsqueeze(1)
        x = x.float() / 255.0 if not x.is_floating_point() else x.float()
        if self.channels == 3 and x.shape[1] == 1:
            x = x.expand(-1, 3, -1, -1)
        elif self.channels == 1 and x.shape[1] == 3:
            x = (x * x.new_tensor(LUMA).view(1, 3, 1, 1)).sum(1, keepdim=True)
        if self.size is not None and tuple(x.shape[-2:]) != self.size:
            x = resize_cover(x, self.size, self.interpolation).clamp_(0.0, 1.0)
        if self.mean is not None and self.std is not None:
            if len(self.mean) not in (1, x.shape[1]) or len(self.std) not in (1, x.shape[1]):
                raise ConfigError(f"mean={list(self.mean)} / std={list(self.std)} do not fit images of {x.shape[1]} "
                                  f"channel(s); give one value, or one per channel")
            mean = x.new_tensor(self.mean).view(1, -1, 1, 1)
            std = x.new_tensor(self.std).view(1, -1, 1, 1)
            x = (x - mean) / std
        return x


def resize_cover(x: torch.Tensor, size: tuple[int, int], interpolation: str) -> torch.Tensor:
    """Resize ``x`` (n, c, h, w) so it covers ``size`` with its aspect ratio kept, then crop the centre."""
    h, w = x.shape[-2:]
    th, tw = size
    scale = max(th / h, tw / w)
    rh, rw = max(th, math.ceil(h * scale - 1e-6)), max(tw, math.ceil(w * scale - 1e-6))
    if (rh, rw) != (h, w):
        smooth = interpolation != "nearest"
        x = F.interpolate(x, size=(rh, rw), mode=interpolation, antialias=smooth,
                          **({"align_corners": False} if smooth else {}))
    top, left = (rh - th) // 2, (rw - tw) // 2
    return x[..., top:top + th, left:left + tw]


@attrs.frozen(kw_only=True)
class TransformSettings:
    """A dataset's say in its transform: ``size``, ``mean``/``std`` overrides, or ``mode = "none"`` ([0, 1] only)."""

    mode: str = "auto"
    size: tuple[int, int] | None = attrs.field(default=None, converter=_pair)
    mean: tuple[float, ...] | None = attrs.field(default=None, converter=_floats)
    std: tuple[float, ...] | None = attrs.field(default=None, converter=_floats)

    def __attrs_post_init__(self) -> None:
        if self.mode not in MODES:
            raise ConfigError(f"transform={self.mode!r}; choose one of: {', '.join(map(repr, MODES))}")
        given = [k for k in ("size", "mean", "std") if getattr(self, k) is not None]
        if self.mode == "none" and given:
            raise ConfigError(f"transform = 'none' takes images as they are stored; it cannot go with {given[0]}")
        ImageTransform(size=self.size, mean=self.mean, std=self.std)  # mean without std, std <= 0: said now

    def resolve(self, model: nn.Module | None) -> ImageTransform:
        """The transform for ``model`` (``None``: the dataset's own settings only)."""
        if self.mode == "none":
            return ImageTransform()
        config = model_input_config(model) if model is not None else None
        config = dict(config or {})
        input_size = config.get("input_size")
        size = self.size or (tuple(input_size[-2:]) if input_size else None)
        mean, std = (self.mean, self.std) if self.mean is not None else (config.get("mean"), config.get("std"))
        interpolation = str(config.get("interpolation") or "bilinear")
        return ImageTransform(size=size, mean=mean, std=std, channels=int(input_size[0]) if input_size else None,
                              interpolation=interpolation if interpolation in INTERPOLATIONS else "bicubic")


def model_input_config(model: nn.Module) -> dict[str, Any] | None:
    """What ``model`` wants as input, in timm's data-config keys, or ``None`` when it does not say (see the
    module docstring for the order: a declared ``fedcore_input_config``, then a timm ``pretrained_cfg``)."""
    modules = list(model.modules())
    for module in modules:
        declared = getattr(module, "fedcore_input_config", None)
        if isinstance(declared, Mapping):
            return dict(declared)
    for module in modules:
        cfg = getattr(module, "pretrained_cfg", None)
        if isinstance(cfg, Mapping) and cfg:
            return _timm_config(module, cfg)
    return None


def _timm_config(module: nn.Module, cfg: Mapping[str, Any]) -> dict[str, Any]:
    from timm.data import resolve_model_data_config

    config = dict(resolve_model_data_config(module))
    channels, height, width = config["input_size"]
    built = getattr(getattr(module, "patch_embed", None), "img_size", None)  # a ViT/Swin built at img_size=32
    if built is not None:
        height, width = _pair(tuple(built)) or (height, width)
    first = cfg.get("first_conv")
    if isinstance(first, str):  # in_chans as built (the pretrained config keeps the pretraining's 3)
        try:
            channels = int(getattr(module.get_submodule(first), "in_channels", channels))
        except AttributeError:
            pass
    config["input_size"] = (channels, height, width)
    if channels == 1:  # a one-channel model of a three-channel pretraining: the luma-weighted statistics
        for key in ("mean", "std"):
            if len(config[key]) == 3:
                config[key] = (sum(w * v for w, v in zip(LUMA, config[key])),)
    return config


__all__ = ["ImageTransform", "TransformSettings", "model_input_config", "resize_cover"]
