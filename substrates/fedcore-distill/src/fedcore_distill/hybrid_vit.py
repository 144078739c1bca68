"""FedVKD's hybrid ViT server, a subclass of timm's DeiT: in a module of its own so that importing the substrate
(registering its plugin) does not import timm; :mod:`fedcore_distill.models` and the package hand it out on demand."""
from __future__ import annotations

from collections.abc import Sequence

from timm.models.deit import VisionTransformerDistilled
import torch

from fedcore import ConfigError


class HybridViT(VisionTransformerDistilled):
    """FedVKD's server encoder: patch embedding on the feature map, cls + distillation tokens, two heads.

    Train mode returns ``(z_cls, z_dist)``, eval mode their mean (DeiT); :meth:`heads` gives both in any mode.
    """

    def __init__(self, *, feature_shape: Sequence[int], num_classes: int, embed_dim: int = 768, depth: int = 12,
                 num_heads: int = 12, patch_size: int = 4, mlp_ratio: float = 4.0) -> None:
        c, h, w = feature_shape
        if h % patch_size or w % patch_size:
            raise ConfigError(f"patch_size={patch_size} does not divide the {h}x{w} feature map")
        super().__init__(img_size=(h, w), patch_size=patch_size, in_chans=c, num_classes=num_classes,
                         embed_dim=embed_dim, depth=depth, num_heads=num_heads, mlp_ratio=mlp_ratio)
        self.set_distilled_training(True)

    def heads(self, h: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        x = self.forward_features(h)
        return self.head(x[:, 0]), self.head_dist(x[:, 1])


__all__ = ["HybridViT"]
