"""The geometry of a global ViT: everything a submodel spec is validated against.

Only the plain timm ``VisionTransformer`` variant is covered (class token, learned position embedding
added to all tokens, token pooling, qkv bias, no layer scale, no pre-norm, no fc-norm): that is the
ViT of the Co-S2P, FedRolex and HeteroFL papers. ``ViTShape.from_timm`` refuses anything else by name.
"""
from __future__ import annotations

from typing import Any

import attrs
from torch import nn

from fedcore.errors import ConfigError
from fedcore.settings import setting


@attrs.frozen(eq=False, kw_only=True)
class ViTShape:
    """Sizes of a ViT with timm's parameter names; ``head_dim = embed_dim // num_heads``."""

    img_size: int = setting(16, low=1)
    patch_size: int = setting(4, low=1)
    in_chans: int = setting(3, low=1)
    num_classes: int = setting(10, low=1)
    embed_dim: int = setting(32, low=1)
    depth: int = setting(4, low=1)
    num_heads: int = setting(4, low=1)
    mlp_hidden: int = setting(64, low=1)
    eps: float = setting(1e-6, low=0.0, low_open=True, help="LayerNorm epsilon (timm ViT uses 1e-6)")

    def __attrs_post_init__(self) -> None:
        if self.embed_dim % self.num_heads:
            raise ConfigError(f"ViTShape.embed_dim={self.embed_dim} is not divisible by num_heads={self.num_heads}")
        if self.img_size % self.patch_size:
            raise ConfigError(f"ViTShape.img_size={self.img_size} is not divisible by patch_size={self.patch_size}")

    @property
    def head_dim(self) -> int:
        return self.embed_dim // self.num_heads

    @property
    def num_tokens(self) -> int:
        """Patches plus the class token."""
        return (self.img_size // self.patch_size) ** 2 + 1

    def to_data(self) -> dict[str, Any]:
        """Plain data (JSON-safe), the form a share's ``meta`` carries."""
        return attrs.asdict(self)

    @classmethod
    def of(cls, model: Any) -> ViTShape:
        """The shape of a global model: a ``PrunableViT`` (its ``shape``) or a plain timm ``VisionTransformer``."""
        shape = getattr(model, "shape", None)
        if isinstance(shape, ViTShape):
            return shape
        return cls.from_timm(model)

    @classmethod
    def from_timm(cls, model: Any) -> ViTShape:
        """The shape of a timm ``VisionTransformer``; other variants get an error naming the feature."""
        from timm.models.vision_transformer import VisionTransformer

        if not isinstance(model, VisionTransformer):
            raise ConfigError(f"expected a timm VisionTransformer, got {type(model).__name__}")
        unsupported = {
            "global_pool": model.global_pool != "token",
            "class_token": model.cls_token is None,
            "reg_tokens": model.reg_token is not None,
            "no_embed_class": model.no_embed_class,
            "pos_embed": model.pos_embed is None,
            "pre_norm": not isinstance(model.norm_pre, nn.Identity),
            "fc_norm": not isinstance(model.fc_norm, nn.Identity),
            "dynamic_img_size": model.dynamic_img_size,
        }
        block: Any = model.blocks[0]
        final_norm: Any = model.norm
        unsupported["init_values (layer scale)"] = not isinstance(block.ls1, nn.Identity)
        unsupported["qkv_bias=False"] = block.attn.qkv.bias is None
        unsupported["qk_norm"] = not isinstance(block.attn.q_norm, nn.Identity)
        bad = [name for name, flag in unsupported.items() if flag]
        if bad:
            raise ConfigError(f"timm VisionTransformer features not supported by PrunableViT: {', '.join(bad)}")
        img = model.patch_embed.img_size
        patch = model.patch_embed.patch_size
        if img[0] != img[1] or patch[0] != patch[1]:
            raise ConfigError(f"only square images and patches are supported, got img_size={img}, patch_size={patch}")
        return cls(img_size=img[0], patch_size=patch[0], in_chans=model.patch_embed.proj.in_channels,
                   num_classes=model.num_classes, embed_dim=model.embed_dim, depth=len(model.blocks),
                   num_heads=int(block.attn.num_heads), mlp_hidden=int(block.mlp.fc1.out_features),
                   eps=float(final_norm.eps))
