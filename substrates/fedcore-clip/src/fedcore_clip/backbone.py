"""A frozen open_clip backbone: image features, token embeddings and the text tower run from embeddings.

open_clip is imported lazily so ``import fedcore_clip`` stays cheap. Every architecture open_clip knows
(``open_clip.list_models()``) can be built, with a real pretrained tag (``pretrained="openai"``) for users
who have the weights, or with random weights (``pretrained=None``) to count parameters or to test. fedcore's
own micro architecture ``fedcore-tiny-clip`` (:data:`TINY_CONFIG`) is registered with open_clip as a config
file in fedcore's cache directory, so it goes
through the same ``open_clip.create_model_and_transforms`` path.
"""
from __future__ import annotations

import difflib
from functools import cache
import json
import logging
import os
from pathlib import Path
from typing import Any, cast

import torch
from torch import nn
from torch.nn import functional as F

from fedcore.errors import ConfigError

TINY = "fedcore-tiny-clip"
TINY_CONFIG = {
    "embed_dim": 64,
    "vision_cfg": {"image_size": 16, "layers": 2, "width": 64, "head_width": 32, "patch_size": 4},
    "text_cfg": {"context_length": 24, "vocab_size": 49408, "width": 64, "heads": 2, "layers": 2},
}
"""fedcore's micro CLIP: ViT width 64, 2 layers, patch 4 on 16x16; text width 64, 2 layers, context 24; 3.4M params."""


def _config_dir() -> Path:
    """A directory holding fedcore's open_clip model configs (written once; open_clip reads configs from files)."""
    root = Path(os.environ.get("FEDCORE_CACHE", Path.home() / ".cache" / "fedcore")) / "open_clip_configs"
    path = root / f"{TINY}.json"
    text = json.dumps(TINY_CONFIG, indent=1, sort_keys=True)
    if not path.exists() or path.read_text() != text:
        root.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(text)
        os.replace(tmp, path)
    return root


@cache
def _open_clip():
    import open_clip

    if TINY not in open_clip.list_models():
        open_clip.add_model_config(_config_dir())
    return open_clip


def architectures() -> list[str]:
    """Every open_clip architecture name, fedcore's micro ones included."""
    return list(_open_clip().list_models())


def check_architecture(name: str) -> None:
    """A clear error for a name open_clip does not know, listing the close matches."""
    names = architectures()
    if name not in names:
        close = difflib.get_close_matches(name, names, n=5, cutoff=0.4)
        hint = f"close matches: {', '.join(close)}" if close else f"{len(names)} known, e.g. {', '.join(names[:6])}"
        raise ConfigError(f"open_clip architecture {name!r} does not exist; {hint}")


@cache
def get_tokenizer(name: str):
    """open_clip's tokenizer for ``name`` (the BPE vocabulary ships with the wheel; works offline)."""
    return _open_clip().get_tokenizer(name)


def create_clip(name: str, *, pretrained: str | None = None, seed: int = 0, **kwargs: Any) -> nn.Module:
    """``open_clip.create_model_and_transforms(name, pretrained)``'s model, seeded, in eval mode.

    Built on torch's current default device (open_clip would move it to the CPU), so inside
    ``with torch.device("meta"):`` a random model (``pretrained=None``) costs no memory: the planner's
    parameter and FLOP counts."""
    check_architecture(name)
    oc = _open_clip()
    kwargs.setdefault("device", torch.empty(0).device)
    quiet = logging.getLogger().isEnabledFor(logging.WARNING) and pretrained is None
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        if quiet:  # open_clip warns "no pretrained weights loaded" on purpose-built random models
            logging.disable(logging.WARNING)
        try:
            model, _, _ = oc.create_model_and_transforms(name, pretrained=pretrained, **kwargs)
        finally:
            if quiet:
                logging.disable(logging.NOTSET)
    return model.eval()


class ImagePrep(nn.Module):
    """Bring any image batch to what the visual tower expects: 3 channels, its size, CLIP normalisation."""

    mean: torch.Tensor
    std: torch.Tensor

    def __init__(self, image_size: int, mean: tuple[float, ...], std: tuple[float, ...]) -> None:
        super().__init__()
        self.image_size = int(image_size)
        self.stats = (tuple(float(m) for m in mean), tuple(float(s) for s in std))  # readable on the meta device
        self.register_buffer("mean", torch.tensor(mean, dtype=torch.float32).view(1, -1, 1, 1), persistent=False)
        self.register_buffer("std", torch.tensor(std, dtype=torch.float32).view(1, -1, 1, 1), persistent=False)

    @property
    def fedcore_input_config(self) -> dict[str, Any]:
        """What a dataset should hand this model (read by fedcore's image transform): [0, 1] images at the
        tower's size, neither normalised nor channel-expanded here, since :meth:`forward` does both."""
        return {"input_size": (3, self.image_size, self.image_size), "mean": None, "std": None,
                "interpolation": "bicubic"}

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.float()
        if x.ndim == 3:
            x = x.unsqueeze(1)
        if x.shape[1] == 1:
            x = x.expand(-1, 3, -1, -1)
        if x.shape[-1] != self.image_size or x.shape[-2] != self.image_size:
            x = F.interpolate(x, size=(self.image_size, self.image_size), mode="bilinear", align_corners=False)
        return (x - self.mean) / self.std


def _image_size(model: nn.Module) -> int:
    size = getattr(model.visual, "image_size", 224)
    return int(size[0] if isinstance(size, (tuple, list)) else size)


class FrozenCLIP(nn.Module):
    """An open_clip CLIP with every parameter frozen and kept in eval mode.

    ``encode_image`` returns L2-normalised joint-space features; ``encode_prompts`` runs the text tower
    from token embeddings (CoOp's TextEncoder), which equals ``model.encode_text(ids)`` when the
    embeddings are the token embeddings of ``ids``.
    """

    # open_clip's CLIP / CustomTextCLIP: its towers, logit_scale and encoders are attributes that mypy sees
    # only as ``Tensor | Module`` (open_clip is untyped), so the wrapped model is typed Any.
    model: Any

    def __init__(self, model: nn.Module, *, name: str = "custom") -> None:
        super().__init__()
        if hasattr(model, "text") and not hasattr(model.text, "token_embedding"):
            raise ConfigError(f"open_clip model {name!r} has a Hugging Face text tower; CoOp prompts need the "
                              f"built-in text transformer (token_embedding + positional_embedding)")
        self.model = model
        self.name = name
        for p in self.model.parameters():
            p.requires_grad_(False)
        self.model.eval()
        mean = getattr(model.visual, "image_mean", None) or (0.48145466, 0.4578275, 0.40821073)
        std = getattr(model.visual, "image_std", None) or (0.26862954, 0.26130258, 0.27577711)
        self.prep = ImagePrep(_image_size(model), tuple(mean), tuple(std))

    def train(self, mode: bool = True) -> FrozenCLIP:  # frozen: always eval (no dropout, fixed BN)
        return super().train(False)

    @property
    def tower(self) -> Any:
        """The module holding the text transformer (the model itself for ``CLIP``, ``.text`` otherwise).

        Typed Any like :attr:`model`: open_clip's text-tower attributes are invisible to mypy.
        """
        return self.model.text if hasattr(self.model, "text") else self.model

    @property
    def context_length(self) -> int:
        return int(self.tower.positional_embedding.shape[0])

    @property
    def token_width(self) -> int:
        return int(self.tower.token_embedding.weight.shape[1])

    @property
    def embed_dim(self) -> int:
        proj = self.tower.text_projection
        return int(proj.out_features if isinstance(proj, nn.Linear) else proj.shape[1])

    def logit_scale(self) -> torch.Tensor:
        """exp(t), CLIP's learned temperature, capped at 100 as in CLIP."""
        return self.model.logit_scale.detach().exp().clamp(max=100.0)

    def embed_tokens(self, ids: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():
            table = self.tower.token_embedding
            return table(ids.to(table.weight.device)).detach()

    @torch.no_grad()
    def encode_image(self, x: torch.Tensor, *, normalize: bool = True) -> torch.Tensor:
        feats = self.model.encode_image(self.prep(x))
        return F.normalize(feats, dim=-1) if normalize else feats

    def encode_prompts(self, emb: torch.Tensor, ids: torch.Tensor, length: int | None = None) -> torch.Tensor:
        """Text features (not normalised) from prompt embeddings ``[K, L, d]`` and their token ids ``[K, L]``.

        The causal tower runs only up to the last end-of-text token (``length`` positions, read from ``ids`` unless
        given; given where ``ids`` has no values, on the meta device): no later position reaches the pooled feature.
        """
        from open_clip.model import text_global_pool

        t = self.tower
        pool = getattr(t, "text_pool_type", "argmax")
        mask = t.attn_mask
        if pool == "argmax" and mask is not None:  # causal: tokens after the last end-of-text never reach the pool
            if length is None and not ids.is_meta:
                length = int(ids.argmax(-1).max()) + 1
            if length is not None:
                emb, ids, mask = emb[:, :length], ids[:, :length], mask[:length, :length]
        cast = t.transformer.get_cast_dtype() if hasattr(t.transformer, "get_cast_dtype") else emb.dtype
        x = emb.to(cast) + t.positional_embedding[:emb.shape[1]].to(cast)
        batch_first = getattr(t.transformer, "batch_first", True)
        if not batch_first:
            x = x.permute(1, 0, 2)
        x = t.transformer(x, attn_mask=mask)
        if not batch_first:
            x = x.permute(1, 0, 2)
        x = t.ln_final(x)
        x = text_global_pool(x, ids, pool, eos_token_id=getattr(t, "text_eos_id", None))
        if isinstance(x, tuple):
            x = x[0]
        proj = t.text_projection
        if proj is not None:
            x = proj(x) if isinstance(proj, nn.Linear) else x @ proj
        return x

    def fingerprint(self) -> str:
        """A cheap identity of the frozen weights (for caches): name and a few parameter sums, computed once."""
        if getattr(self, "_fingerprint", None) is None:
            params = list(self.model.parameters())
            picks = [params[0], params[len(params) // 2], params[-1]]
            self._fingerprint = f"{self.name}:" + ":".join(f"{float(p.double().sum()):.10e}" for p in picks)
        return self._fingerprint


def load_backbone(name: str = TINY, *, pretrained: str | None = None, seed: int = 0, **kwargs: Any) -> FrozenCLIP:
    """A frozen backbone of any open_clip architecture; ``pretrained`` is an open_clip tag or a checkpoint path."""
    return FrozenCLIP(create_clip(name, pretrained=pretrained, seed=seed, **kwargs), name=name)


def parameter_counts(model: nn.Module) -> dict[str, int]:
    """Parameters of the whole CLIP, its image tower and the rest (text tower, projections, logit scale)."""
    total = sum(p.numel() for p in model.parameters())
    visual = cast(nn.Module, model.visual)  # open_clip's image tower; the attribute is untyped
    image = sum(p.numel() for p in visual.parameters())
    return {"total": total, "image": image, "text": total - image}
