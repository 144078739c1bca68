"""The masked forward (w ⊙ M̂): the full-width model run with a spec's width as 0/1 multipliers.

Co-S2P trains mask logits on the full-width depth window before any slicing; with binary masks the
masked forward must answer exactly like the sliced submodel, which is what ``masked_forward`` checks
against ``extract``.
"""
from __future__ import annotations

import torch

from fedcore.errors import ConfigError
from fedcore_pruning.spec import SubmodelSpec
from fedcore_pruning.vit import BlockMasks, PrunableViT


def _indicator(kept: tuple[int, ...], size: int, like: torch.Tensor | None) -> torch.Tensor:
    m = torch.zeros(size) if like is None else like.new_zeros(size)
    m[list(kept)] = 1.0
    return m


def binary_masks(spec: SubmodelSpec, like: torch.Tensor | None = None) -> list[BlockMasks]:
    """One ``BlockMasks`` of 0/1 values per kept block, in the full model's coordinates (dtype and device of
    ``like`` when given)."""
    s = spec.shape
    return [BlockMasks(heads=_indicator(k.heads, s.num_heads, like), hidden=_indicator(k.hidden, s.mlp_hidden, like),
                       attn_out=_indicator(k.attn_out, s.embed_dim, like),
                       mlp_out=_indicator(k.mlp_out, s.embed_dim, like))
            for k in spec.blocks]


def masked_forward(model: PrunableViT, spec: SubmodelSpec, x: torch.Tensor) -> list[torch.Tensor]:
    """Outputs of ``spec``'s submodel computed on the full model with binary masks instead of slicing.

    Blocks past the window are skipped; exits use the global final norm and head (what ``extract``
    initialises them from); logits are restricted to ``spec.classes``. Same order as ``forward_all``.
    """
    if len(model.blocks) != spec.shape.depth or len(model.spec.blocks[0].heads) != spec.shape.num_heads:
        raise ConfigError("masked_forward needs the full model (every block at full width)")
    if not hasattr(model, "head"):
        raise ConfigError("masked_forward needs the full model's final norm and head")
    classes = torch.tensor(spec.classes, dtype=torch.long, device=x.device)
    masks = binary_masks(spec, like=model.cls_token)
    outputs = []
    h = model.embed(x)
    for b in range(spec.kept_depth):
        h = model.blocks[b](h, masks[b])
        if b + 1 in spec.exits:
            outputs.append(model.head(model.norm(h)[:, 0])[:, classes])
    if spec.head:
        outputs.append(model.head(model.norm(h)[:, 0])[:, classes])
    return outputs
