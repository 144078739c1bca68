"""Where pre-trained weights come from: a local file read without running code, or a hub cache.

A local file is safetensors (``.safetensors``) or a torch checkpoint (``.pth``, ``.pt``, ``.bin``, ``.ckpt``)
read with ``torch.load(weights_only=True)``: torch's restricted unpickler, which builds tensors and plain
containers only and refuses any other global (``os.system``, a class of the saving code) before calling it.
:func:`hub_locations` names the caches a hub download reads (the Hugging Face hub cache, torch hub's
checkpoints), for the one line that says where fedcore looked when weights are neither cached nor reachable.
"""
from __future__ import annotations

from collections.abc import Mapping
import os
from pathlib import Path
import pickle
import re
from typing import Any

import torch

from fedcore.errors import ConfigError

SAFETENSORS = ".safetensors"
TORCH_SUFFIXES = (".pth", ".pt", ".bin", ".ckpt")
WEIGHT_SUFFIXES = (SAFETENSORS, *TORCH_SUFFIXES)
_REFUSED_GLOBAL = re.compile(r"[Uu]nsupported (?:GLOBAL|global):? ([\w.]+)")
WRAPPER_KEYS = ("state_dict_ema", "model_ema", "state_dict", "model")
"""Keys under which training scripts (timm's among them) nest the weights in a checkpoint; the first found wins."""


def looks_like_file(value: str) -> bool:
    """Whether a ``pretrained`` string names a file (a weights suffix or a path separator) rather than a tag."""
    return value.lower().endswith(WEIGHT_SUFFIXES) or "/" in value or os.sep in value


def weights_path(value: str) -> Path:
    """The existing weights file ``value`` names; a missing one or an unknown suffix is one line with the path."""
    path = Path(value).expanduser()
    if not path.is_file():
        state = "is a directory, not a file" if path.is_dir() else "does not exist"
        raise ConfigError(f"pretrained = {value!r}: the weights file {path.resolve()} {state}")
    if path.suffix.lower() not in WEIGHT_SUFFIXES:
        raise ConfigError(f"pretrained = {value!r}: unknown weights format {path.suffix or '(no suffix)'}; "
                          f"give a {' / '.join(WEIGHT_SUFFIXES)} file")
    return path


def read_weights(path: Path) -> dict[str, torch.Tensor]:
    """The tensors of a weights file on the CPU, read without executing code (one ConfigError line otherwise).

    A torch checkpoint that nests its weights (``{"state_dict": ...}``, ``{"model": ...}``) is unwrapped, and a
    ``module.`` prefix (DataParallel) is dropped, as timm's own loader does.
    """
    try:
        if path.suffix.lower() == SAFETENSORS:
            from safetensors.torch import load_file

            return dict(load_file(str(path), device="cpu"))
        checkpoint: Any = torch.load(str(path), map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as exc:
        found = _REFUSED_GLOBAL.search(str(exc))
        what = f"it needs {found.group(1)}" if found else "it holds pickled objects"
        raise ConfigError(f"refused to load {path}: it is not a weights-only checkpoint ({what}, which only "
                          f"running code from the file could rebuild; fedcore never does); save the state dict with "
                          f"safetensors.torch.save_file or torch.save(model.state_dict(), ...)") from None
    except Exception as exc:  # noqa: BLE001 - safetensors/torch raise many types for a damaged file
        reason = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:160]
        raise ConfigError(f"cannot read the weights file {path} ({type(exc).__name__}: {reason})") from None
    return _unwrap(checkpoint, path)


def _unwrap(checkpoint: Any, path: Path) -> dict[str, torch.Tensor]:
    if isinstance(checkpoint, Mapping):
        for key in WRAPPER_KEYS:
            if isinstance(checkpoint.get(key), Mapping):
                checkpoint = checkpoint[key]
                break
    if not isinstance(checkpoint, Mapping) or not all(isinstance(v, torch.Tensor) for v in checkpoint.values()):
        raise ConfigError(f"{path} holds no state dict (a mapping of names to tensors); got "
                          f"{type(checkpoint).__name__}")
    return {k.removeprefix("module."): v for k, v in checkpoint.items()}


def hub_locations() -> dict[str, str]:
    """The caches a hub download reads, by name: ``hf`` (the Hugging Face hub cache) and ``torch`` (torch hub's
    checkpoints directory); read at call time (``HF_HOME``/``HF_HUB_CACHE`` as huggingface_hub read them when it
    was imported, ``TORCH_HOME`` now)."""
    out = {"torch": str(Path(torch.hub.get_dir()) / "checkpoints")}
    try:
        from huggingface_hub import constants
    except ImportError:  # pragma: no cover - timm and open_clip depend on huggingface_hub
        return out
    out["hf"] = str(constants.HF_HUB_CACHE)
    return out


def offline_hint() -> str:
    """What to do on a machine without network, unless huggingface_hub is already in offline mode."""
    try:
        from huggingface_hub import constants
    except ImportError:  # pragma: no cover
        return ""
    if constants.HF_HUB_OFFLINE:
        return "HF_HUB_OFFLINE is set"
    return "without network set HF_HUB_OFFLINE=1, so the hub client reads its cache at once instead of retrying"


def first_line(exc: BaseException, limit: int = 140) -> str:
    """``Type: first sentence of the message`` of an exception raised deep inside a hub client or a loader."""
    text = (str(exc).strip().splitlines() or [""])[0].strip().split(". ")[0].rstrip(".")
    return f"{type(exc).__name__}: {text[:limit]}" if text else type(exc).__name__


__all__ = ["TORCH_SUFFIXES", "WEIGHT_SUFFIXES", "first_line", "hub_locations", "looks_like_file", "offline_hint",
           "read_weights", "weights_path"]
