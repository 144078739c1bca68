"""Physical slicing of the global ViT into a submodel (``extract``) and its exact inverse (``scatter``).

Both walk the same ``index_map``: for every global tensor the submodel holds, the kept rows and
columns in global coordinates. qkv rows of head h are ``{p*D + h*hd + j : p in q,k,v; j < hd}``,
exactly timm's layout. Exit heads are the client's own and never part of the global state.
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping

import torch
from torch import nn

from fedcore.errors import ConfigError
from fedcore.types import TensorDict
from fedcore_pruning.errors import SubmodelMismatchError
from fedcore_pruning.spec import SubmodelSpec
from fedcore_pruning.vit import PrunableViT

Index = tuple[torch.Tensor | None, ...]  # one entry per dimension; None keeps that dimension whole


def _rows(idx: tuple[int, ...], size: int) -> torch.Tensor | None:
    return None if len(idx) == size else torch.tensor(idx, dtype=torch.long)


def head_rows(heads: tuple[int, ...], head_dim: int, num_heads: int) -> torch.Tensor:
    """Global qkv rows of the given heads, in the sliced model's order (q heads, k heads, v heads)."""
    width = num_heads * head_dim
    within = torch.cat([h * head_dim + torch.arange(head_dim) for h in heads])
    return torch.cat([p * width + within for p in range(3)])


def index_map(spec: SubmodelSpec) -> dict[str, Index]:
    """Global name -> kept index per dimension, for every global tensor the submodel of ``spec`` holds."""
    shape = spec.shape
    d, hd, nh = shape.embed_dim, shape.head_dim, shape.num_heads
    out: dict[str, Index] = {"cls_token": (), "pos_embed": (), "patch_embed.proj.weight": (),
                             "patch_embed.proj.bias": ()}
    for b, keep in enumerate(spec.blocks):
        p = f"blocks.{b}."
        full_heads = len(keep.heads) == nh
        qkv = None if full_heads else head_rows(keep.heads, hd, nh)
        head_cols = None if full_heads else torch.cat([h * hd + torch.arange(hd) for h in keep.heads])
        attn_out, mlp_out = _rows(keep.attn_out, d), _rows(keep.mlp_out, d)
        hidden = _rows(keep.hidden, shape.mlp_hidden)
        out |= {p + "norm1.weight": (), p + "norm1.bias": (), p + "norm2.weight": (), p + "norm2.bias": (),
                p + "attn.qkv.weight": (qkv, None), p + "attn.qkv.bias": (qkv,),
                p + "attn.proj.weight": (attn_out, head_cols), p + "attn.proj.bias": (attn_out,),
                p + "mlp.fc1.weight": (hidden, None), p + "mlp.fc1.bias": (hidden,),
                p + "mlp.fc2.weight": (mlp_out, hidden), p + "mlp.fc2.bias": (mlp_out,)}
    if spec.head:
        classes = _rows(spec.classes, shape.num_classes)
        out |= {"norm.weight": (), "norm.bias": (), "head.weight": (classes, None), "head.bias": (classes,)}
    return out


def _take(t: torch.Tensor, index: Index) -> torch.Tensor:
    for dim, idx in enumerate(index):
        if idx is not None:
            t = t.index_select(dim, idx.to(t.device))
    return t


def _selector(index: Index, ndim: int, device: torch.device) -> tuple:
    """An advanced-indexing key that addresses the kept block of a tensor (open mesh, like numpy.ix_)."""
    key: list = []
    n_index = len([i for i in index if i is not None])
    seen = 0
    for dim in range(ndim):
        idx = index[dim] if dim < len(index) else None
        if idx is None:
            key.append(slice(None))
        else:
            shape = [1] * n_index
            shape[seen] = -1
            key.append(idx.to(device).view(shape))
            seen += 1
    return tuple(key)


def trainable_names(spec: SubmodelSpec) -> set[str]:
    """Global names the client of ``spec`` trains: its window's blocks, the embeddings when the window
    starts at block 0, and the final norm and head when the spec includes them."""
    names = set()
    for name in index_map(spec):
        if name.startswith("blocks."):
            if spec.is_trainable_block(int(name.split(".")[1])):
                names.add(name)
        elif name.split(".")[0] in ("patch_embed", "cls_token", "pos_embed"):
            if spec.embeddings_trainable:
                names.add(name)
        else:
            names.add(name)
    return names


def _global_state(model: nn.Module | Mapping[str, torch.Tensor]) -> Mapping[str, torch.Tensor]:
    return model.state_dict() if isinstance(model, nn.Module) else model


def extract(model: nn.Module | Mapping[str, torch.Tensor], spec: SubmodelSpec) -> PrunableViT:
    """The physically sliced submodel of ``spec``, weights copied from the global ``model`` (module or state).

    Exits start as copies of the global final norm and the head's kept rows, so before training the
    deepest exit at full depth answers like the global head.
    """
    state = _global_state(model)
    imap = index_map(spec)
    missing = [name for name in imap if name not in state]
    if missing:
        raise ConfigError(f"the global model lacks {len(missing)} tensor(s) the spec needs, e.g. {missing[:3]}")
    ref = state["cls_token"]
    with torch.device(ref.device):  # built where the global model lives (no CPU copy of a meta or GPU model)
        sub = PrunableViT(spec.shape, spec)
    sub = sub.to(dtype=ref.dtype)
    sub_state = {name: _take(state[name], index).clone() for name, index in imap.items()}
    classes = _rows(spec.classes, spec.shape.num_classes)
    for depth in spec.exits:
        p = f"exits.{depth}."
        sub_state |= {p + "norm.weight": state["norm.weight"].clone(), p + "norm.bias": state["norm.bias"].clone(),
                      p + "head.weight": _take(state["head.weight"], (classes, None)).clone(),
                      p + "head.bias": _take(state["head.bias"], (classes,)).clone()}
    expected = sub.state_dict()
    for name, value in sub_state.items():
        if value.shape != expected[name].shape:
            raise ConfigError(f"global tensor {name} gives shape {tuple(value.shape)} after slicing; the submodel "
                              f"needs {tuple(expected[name].shape)} (is the global model of shape {spec.shape}?)")
    sub.load_state_dict(sub_state, strict=True)
    return sub


def scatter(sub_state: Mapping[str, torch.Tensor], spec: SubmodelSpec, *,
            into: Mapping[str, torch.Tensor]) -> tuple[TensorDict, dict[str, torch.Tensor]]:
    """Write the submodel tensors of ``sub_state`` back into a copy of ``into`` (global coordinates).

    Returns ``(state, written)``: ``written[name]`` is a bool tensor of the global shape, True exactly
    where a value was written. Exit tensors (``exits.*``) are personal and skipped; any other name the
    spec does not hold, or a tensor of the wrong shape, is an error and nothing is written.
    """
    imap = index_map(spec)
    names = [n for n in sub_state if not n.startswith("exits.")]
    unknown = [n for n in names if n not in imap]
    if unknown:
        raise SubmodelMismatchError(f"sub_state has tensors the spec does not hold: {unknown[:5]}")
    for name in names:
        if name not in into:
            raise SubmodelMismatchError(f"sub_state tensor {name} has no counterpart in the global state")
        index = imap[name]
        want = tuple(len(i) if i is not None else into[name].shape[d]
                     for d, i in enumerate(index + (None,) * (into[name].dim() - len(index))))
        if tuple(sub_state[name].shape) != want:
            raise SubmodelMismatchError(f"sub_state tensor {name} has shape {tuple(sub_state[name].shape)}; the spec's "
                                     f"index map needs {want} (global {tuple(into[name].shape)})")
    state = {name: t.clone() for name, t in into.items()}
    written = {}
    for name in names:
        key = _selector(imap[name], state[name].dim(), state[name].device)
        state[name][key] = sub_state[name].to(state[name].dtype)
        mask = torch.zeros(state[name].shape, dtype=torch.bool, device=state[name].device)
        mask[key] = True
        written[name] = mask
    return state, written


def element_mask(spec: SubmodelSpec, global_state: Mapping[str, torch.Tensor],
                 names: Iterable[str] | None = None) -> dict[str, torch.Tensor]:
    """``name -> bool tensor`` of the global shape, True on the elements the submodel of ``spec`` holds
    (every name of its index map, or only ``names``); the same mask ``scatter`` returns as ``written``."""
    imap = index_map(spec)
    chosen = list(imap) if names is None else list(names)
    unknown = [n for n in chosen if n not in imap]
    if unknown:
        raise SubmodelMismatchError(f"tensors outside the spec's index map: {unknown[:5]}")
    out = {}
    for name in chosen:
        if name not in global_state:
            raise SubmodelMismatchError(f"tensor {name} of the spec's index map has no counterpart in the global state")
        like = global_state[name]
        mask = torch.zeros(like.shape, dtype=torch.bool, device=like.device)
        mask[_selector(imap[name], like.dim(), like.device)] = True
        out[name] = mask
    return out
