"""Any timm architecture by name, with its pre-trained weights from the hub or from a local file.

    model = { name = "timm", arch = "deit_small_patch16_224", pretrained = true }                # hub (or its cache)
    model = { name = "timm", arch = "vit_base_patch16_224", pretrained = "weights/vit_b.safetensors" }
    model = { name = "timm", arch = "vit_tiny_patch16_224", img_size = 32, drop_path_rate = 0.1 }   # random init

timm is optional (``pip install 'fedcore[vision]'``) and imported when a model is built. ``pretrained = true``
goes through timm's own hub loading (the Hugging Face hub, or torch hub for the architectures timm serves by
URL), so the cache and ``HF_HUB_OFFLINE`` work as they do for timm. A file is read by fedcore without running
code (:mod:`fedcore.models.weights`) and handed to timm as a state dict (``pretrained_cfg_overlay``), so timm
adapts it as it adapts its own weights: the classifier is dropped (and freshly initialised) when
``num_classes`` differs from the checkpoint's, the input convolution is adapted to ``in_chans``, and the
model's checkpoint filter (a ViT's position embeddings resampled to ``img_size``) runs. Random weights come
from torch's global generator, which a config run seeds with its ``seed``.

Every failure is one line: an unknown architecture (with close matches), a setting timm's constructor does
not take, a missing or code-carrying file, and weights that are neither cached nor reachable (naming the
architecture, the tag and the cache fedcore looked in).
"""
from __future__ import annotations

import difflib
from pathlib import Path
import re
from types import ModuleType
from typing import Any

from torch import nn

from fedcore.errors import ConfigError
from fedcore.models.micro import timm_module
from fedcore.models.weights import (
    first_line,
    hub_locations,
    looks_like_file,
    offline_hint,
    read_weights,
    weights_path,
)
from fedcore.settings import settings_help

_UNEXPECTED = re.compile(r"unexpected keyword argument '(\w+)'")
_NETWORK_MODULES = ("huggingface_hub", "httpx", "httpcore", "requests", "urllib3", "urllib")


def _timm() -> ModuleType:
    return timm_module("timm", "model timm")


def check_architecture(arch: str) -> None:
    """One ConfigError line for a name timm does not know (with the close matches) or a tag it has no weights for."""
    timm = _timm()
    if not isinstance(arch, str) or not arch:
        raise ConfigError(f"arch = {arch!r}: name a timm architecture, e.g. \"deit_small_patch16_224\"")
    base, _, tag = arch.partition(".")
    if not timm.is_model(base):
        names = timm.list_models()
        close = difflib.get_close_matches(base, names, n=5, cutoff=0.5)
        hint = f"close matches: {', '.join(close)}" if close else f"{len(names)} known (timm.list_models())"
        raise ConfigError(f"timm architecture {arch!r} does not exist; {hint}")
    if tag:
        tags = [name.partition(".")[2] for name in timm.list_pretrained(f"{base}.*")]
        if tag not in tags:
            raise ConfigError(f"timm architecture {base!r} has no pretrained tag {tag!r}; its tags: "
                              f"{', '.join(tags) or '(none)'}")


@settings_help(
    arch="a timm architecture (timm.list_models()), optionally with a pretrained tag: "
         "\"vit_base_patch16_224.augreg2_in21k_ft_in1k\"",
    pretrained="true: timm's weights from the hub (or its cache); a .safetensors/.pth/.bin file: loaded without "
               "running code; false: random init (seeded by the run)",
    num_classes="classes of the head (a config fills in the data set's); differing from the checkpoint's head: a "
                "fresh head, as timm does",
    kwargs="passed to timm.create_model: img_size, patch_size, in_chans, drop_path_rate, drop_rate, global_pool, "
           "depth, embed_dim, ...",
)
def timm_model(*, arch: str, pretrained: bool | str = False, num_classes: int | None = None,
               **kwargs: Any) -> nn.Module:
    """Any timm architecture by name; pre-trained weights from the hub (``pretrained = true``) or a local file."""
    check_architecture(arch)
    if num_classes is not None:
        kwargs["num_classes"] = num_classes
    if pretrained is None or pretrained is False:
        return _create(arch, kwargs)
    if pretrained is True:
        return _from_hub(arch, kwargs)
    if isinstance(pretrained, str):
        if not looks_like_file(pretrained):
            raise ConfigError(f"pretrained = {pretrained!r} is neither true, false nor a weights file; for one of "
                              f"timm's tags write arch = \"{arch.partition('.')[0]}.TAG\" and pretrained = true")
        return _from_file(arch, pretrained, kwargs)
    raise ConfigError(f"pretrained = {pretrained!r}: give true (timm's weights), false (random) or a weights file")


def _create(arch: str, kwargs: dict[str, Any], **weights: Any) -> nn.Module:
    """``timm.create_model``, with a setting its constructor refuses reported in one line."""
    try:
        return _timm().create_model(arch, **weights, **kwargs)
    except TypeError as exc:
        found = _UNEXPECTED.search(str(exc))
        if found:
            raise ConfigError(f"timm architecture {arch!r} does not take the setting {found.group(1)!r} "
                              f"(timm.create_model passes it to the model's constructor, which refused it)") from None
        raise ConfigError(f"timm.create_model({arch!r}) refused the settings {sorted(kwargs)}: "
                          f"{first_line(exc)}") from None


def _from_hub(arch: str, kwargs: dict[str, Any]) -> nn.Module:
    """timm's own weights: ``create_model(pretrained=True)``, its hub download and cache."""
    timm = _timm()
    cfg = timm.models.get_pretrained_cfg(arch)
    if cfg is None or not cfg.has_weights:
        base = arch.partition(".")[0]
        tags = [name.partition(".")[2] for name in timm.list_pretrained(f"{base}.*")]
        raise ConfigError(f"timm has no pretrained weights for {arch!r}"
                          + (f"; its tags with weights: {', '.join(tags)}" if tags else "; use pretrained = false"))
    try:
        return _create(arch, kwargs, pretrained=True)
    except ConfigError:
        raise
    except Exception as exc:  # noqa: BLE001 - hub clients and loaders raise many types; each becomes one line
        if not _unreachable(exc):
            raise ConfigError(f"timm could not load the pretrained weights of {arch!r} (tag {cfg.tag}): "
                              f"{first_line(exc)}") from None
        raise ConfigError(f"pretrained weights of timm {cfg.architecture or arch} (tag {cfg.tag}) are neither cached "
                          f"nor reachable: looked in {_where(cfg)} ({first_line(exc)}; {offline_hint()}); put them "
                          f"there (HF_HOME / TORCH_HOME move the caches) or give pretrained = "
                          f"\"path/to/weights.safetensors\"") from None


def _unreachable(exc: BaseException) -> bool:
    """A download or cache miss (OSError, or an error of a hub/HTTP client), rather than a loading bug."""
    return isinstance(exc, OSError) or type(exc).__module__.split(".")[0] in _NETWORK_MODULES


def _where(cfg: Any) -> str:
    """The caches timm reads for ``cfg``: the Hugging Face hub cache when it names a hub repo, else torch hub's."""
    caches = hub_locations()
    if cfg.hf_hub_id and "hf" in caches:
        name = cfg.hf_hub_id + (f" ({cfg.hf_hub_filename})" if cfg.hf_hub_filename else "")
        return f"the Hugging Face hub cache {caches['hf']} for {name}"
    url = cfg.url[0] if isinstance(cfg.url, (tuple, list)) else cfg.url
    return f"torch hub's cache {caches['torch']} for {Path(str(url)).name}"


def _from_file(arch: str, value: str, kwargs: dict[str, Any]) -> nn.Module:
    """A local weights file, read without running code, adapted to the model by timm's pretrained loading."""
    timm = _timm()
    path = weights_path(value)
    state = read_weights(path)
    cfg = timm.models.get_pretrained_cfg(arch)  # None for an architecture timm has no weights for
    classifier = cfg.classifier if cfg is not None else None
    heads = (classifier,) if isinstance(classifier, str) else tuple(classifier or ())
    head = next((state[f"{h}.weight"] for h in heads if f"{h}.weight" in state), None)
    overlay: dict[str, Any] = {"state_dict": state, "custom_load": False, "source": None,
                               "num_classes": int(head.shape[0]) if head is not None else -1}
    first_conv = cfg.first_conv if cfg is not None else None
    conv = state.get(f"{first_conv}.weight") if isinstance(first_conv, str) else None
    if conv is not None and conv.ndim == 4 and cfg is not None:
        overlay["input_size"] = (int(conv.shape[1]), *tuple(cfg.input_size)[1:])  # the file's channels
    try:
        model = _create(arch, kwargs, pretrained=True, pretrained_cfg_overlay=overlay)
    except ConfigError:
        raise
    except Exception as exc:  # noqa: BLE001 - load_state_dict's RuntimeError lists keys over many lines
        reason = " ".join(str(exc).split())
        reason = reason.split(":", 1)[1].strip() if reason.startswith("Error(s) in loading state_dict") else reason
        raise ConfigError(f"the weights in {path} do not fit timm {arch} with these settings: "
                          f"{reason[:200]}{'...' if len(reason) > 200 else ''}") from None
    for attr in ("pretrained_cfg", "default_cfg"):  # timm keeps the cfg on the model (twice): drop the state dict
        info = getattr(model, attr, None)            # it was handed (every copy of the model would copy it), name
        if isinstance(info, dict):                   # the file instead
            setattr(model, attr, {**{k: v for k, v in info.items() if k != "state_dict"}, "file": str(path)})
    return model
