"""Submodel coordinates: the global tensor shapes a spec's blocks need, and the element mask of what a spec trains.

A client's upload is in the coordinates of the submodel it was sent; the aggregator takes that spec from the
update's :class:`~fedcore_cos2p.submodel.Cos2pSubmodel` and maps the upload back into global coordinates with the
substrate's ``scatter``.
"""
from __future__ import annotations

from collections.abc import Mapping

import torch

from fedcore.errors import ConfigError
from fedcore_pruning import SubmodelMismatchError, SubmodelSpec, ViTShape, index_map, trainable_names

PART_FIELDS = ("heads", "hidden", "attn_out", "mlp_out")


def global_shapes(shape: ViTShape, blocks: int) -> dict[str, tuple[int, ...]]:
    """Shapes of the global tensors of the embeddings, the first ``blocks`` blocks, the final norm and head."""
    d, f, c = shape.embed_dim, shape.mlp_hidden, shape.num_classes
    out = {"cls_token": (1, 1, d), "pos_embed": (1, shape.num_tokens, d),
           "patch_embed.proj.weight": (d, shape.in_chans, shape.patch_size, shape.patch_size),
           "patch_embed.proj.bias": (d,), "norm.weight": (d,), "norm.bias": (d,), "head.weight": (c, d),
           "head.bias": (c,)}
    for b in range(blocks):
        p = f"blocks.{b}."
        out |= {p + "norm1.weight": (d,), p + "norm1.bias": (d,), p + "norm2.weight": (d,), p + "norm2.bias": (d,),
                p + "attn.qkv.weight": (3 * d, d), p + "attn.qkv.bias": (3 * d,), p + "attn.proj.weight": (d, d),
                p + "attn.proj.bias": (d,), p + "mlp.fc1.weight": (f, d), p + "mlp.fc1.bias": (f,),
                p + "mlp.fc2.weight": (d, f), p + "mlp.fc2.bias": (d,)}
    return out


def zeros_like_global(spec: SubmodelSpec, like: torch.Tensor) -> dict[str, torch.Tensor]:
    """Zero tensors of global shape for every tensor ``spec`` holds (dtype and device of ``like``)."""
    shapes = global_shapes(spec.shape, spec.kept_depth)
    return {name: like.new_zeros(shapes[name]) for name in index_map(spec)}


def trained_mask(spec: SubmodelSpec, global_state: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Bool masks (global shape) of the elements a client with ``spec`` trains: its window and kept units."""
    imap = index_map(spec)
    out = {}
    for name in sorted(trainable_names(spec)):
        if name not in global_state:
            raise SubmodelMismatchError(f"the submodel trains {name}, which the global model does not have")
        ref = global_state[name]
        mask = torch.zeros(ref.shape, dtype=torch.bool, device=ref.device)
        index = [i for i in imap[name]] + [None] * (ref.dim() - len(imap[name]))
        rows = slice(None) if index[0] is None else index[0].to(ref.device)
        if ref.dim() >= 2 and index[1] is not None:
            cols = index[1].to(ref.device)
            if isinstance(rows, slice):
                mask[:, cols] = True
            else:
                mask[rows[:, None], cols[None, :]] = True
        else:
            mask[rows] = True
        out[name] = mask
    return out


def check_same_model(spec: SubmodelSpec, global_state: Mapping[str, torch.Tensor]) -> None:
    """Every tensor the spec holds exists in the global state with the shape the spec's ViT gives it."""
    shapes = global_shapes(spec.shape, spec.kept_depth)
    for name in index_map(spec):
        if name not in global_state:
            raise SubmodelMismatchError(f"the update's index map names {name}, which the global model lacks")
        if tuple(global_state[name].shape) != shapes[name]:
            raise SubmodelMismatchError(f"the update's index map expects {name} of shape {shapes[name]}; the global "
                                        f"model has {tuple(global_state[name].shape)}")


def shape_of(model: torch.nn.Module) -> ViTShape:
    """The ``ViTShape`` of a global model: a ``PrunableViT`` or a plain timm ``VisionTransformer``."""
    own = getattr(model, "shape", None)
    if isinstance(own, ViTShape):
        return own
    try:
        return ViTShape.from_timm(model)
    except ConfigError as exc:
        raise ConfigError(f"Co-S2P needs a ViT global model (a timm VisionTransformer or a PrunableViT): {exc}"
                          ) from None
