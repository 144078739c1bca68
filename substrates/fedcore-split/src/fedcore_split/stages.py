"""A model as an ordered list of named *stages*, and :class:`Segment`, a module holding some of them.

Split learning cuts a model between stages. Stages are coarse on purpose (a whole transformer block,
the patch embedding), so a cut never separates a residual from its branch:

* timm ``VisionTransformer`` (ViT, DeiT, distilled DeiT): ``patch_embed``, ``embed`` (class/dist/register
  tokens, position embedding, dropout, ``norm_pre``), ``blocks.0`` ... ``blocks.{depth-1}``, ``pool``
  (token selection or average), ``norm`` and ``head`` (``fc_norm``, dropout, classifier). timm applies
  ``norm`` before pooling; a per-token LayerNorm commutes with token selection and averaging models
  have ``norm = Identity``, so ``pool`` comes first and the client's tail can be "LayerNorm + Linear"
  (the FedV/FeSViBS tail). With an attention pool (``global_pool="map"``) the order stays timm's.
* ``nn.Sequential``: one stage per child, named by the child's key.

A :class:`Segment` registers the modules and parameters of its stages under the *same* state-dict
names as the full model, so uploads, FedAvg and ``load_state_dict`` on the global model need no
renaming, and runs the stages with timm's own code (``_pos_embed``, ``pool``).
"""
from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
import copy
import functools
from typing import Any

import torch
from torch import nn

from fedcore.errors import ConfigError

StageFn = Callable[["Segment", torch.Tensor], torch.Tensor]

# plain (non-module) attributes timm's ViT methods read; copied into every segment of a ViT
_VIT_FLAGS = ("num_prefix_tokens", "no_embed_class", "dynamic_img_size", "global_pool", "pool_include_prefix",
              "has_class_token", "num_reg_tokens", "embed_dim", "num_features", "num_classes", "distilled_training")


def _is_vit(model: nn.Module) -> bool:
    try:
        from timm.models.vision_transformer import VisionTransformer
    except ImportError:  # timm is optional
        return False
    return isinstance(model, VisionTransformer)


def _is_distilled(model: nn.Module) -> bool:
    return hasattr(model, "dist_token") and hasattr(model, "head_dist")


# The stage functions below reach timm's own attributes by name on the segment (``Any``: nn.Module's
# ``__getattr__`` is typed as returning ``Tensor | Module``).
def _embed(seg: Any, x: torch.Tensor) -> torch.Tensor:
    x = seg.model_cls._pos_embed(seg, x)
    x = seg.patch_drop(x)
    return seg.norm_pre(x)


def _child(name: str, seg: Segment, x: torch.Tensor) -> torch.Tensor:
    """Run the sub-module at dotted path ``name`` (``blocks.3``, ``patch_embed``, ``0``)."""
    obj: Any = seg
    for part in name.split("."):
        obj = getattr(obj, part)
    return obj(x)


def _pool(seg: Any, x: torch.Tensor) -> torch.Tensor:
    if seg.distilled:
        return x[:, :2]  # cls and dist tokens; the head averages their two classifiers (timm's eval behaviour)
    return seg.model_cls.pool(seg, x)


def _head(seg: Any, x: torch.Tensor) -> torch.Tensor:
    if seg.distilled:
        cls_tok, dist_tok = seg.head_drop(x[:, 0]), seg.head_drop(x[:, 1])
        return (seg.head(cls_tok) + seg.head_dist(dist_tok)) / 2
    return seg.head(seg.head_drop(seg.fc_norm(x)))


def _vit_stages(model: nn.Module) -> list[tuple[str, tuple[str, ...], StageFn]]:
    if getattr(model, "dynamic_img_size", False):
        raise ConfigError("cannot split a VisionTransformer built with dynamic_img_size=True; "
                          "build it with a fixed img_size")
    distilled = _is_distilled(model)
    embed_owns = ("cls_token", "reg_token", "dist_token", "pos_embed", "pos_drop", "patch_drop", "norm_pre")
    stages: list[tuple[str, tuple[str, ...], StageFn]] = [
        ("patch_embed", ("patch_embed",), functools.partial(_child, "patch_embed")),
        ("embed", embed_owns, _embed),
    ]
    blocks: Any = model.blocks
    stages += [(f"blocks.{i}", (f"blocks.{i}",), functools.partial(_child, f"blocks.{i}"))
               for i in range(len(blocks))]
    pool = ("pool", ("attn_pool",), _pool)
    norm = ("norm", ("norm",), functools.partial(_child, "norm"))
    stages += [norm, pool] if getattr(model, "attn_pool", None) is not None else [pool, norm]
    head_owns = ("head_drop", "head", "head_dist") if distilled else ("fc_norm", "head_drop", "head")
    stages.append(("head", head_owns, _head))
    return stages


def _sequential_stages(model: nn.Sequential) -> list[tuple[str, tuple[str, ...], StageFn]]:
    return [(name, (name,), functools.partial(_child, name)) for name, _ in model.named_children()]


def stages_of(model: nn.Module) -> list[tuple[str, tuple[str, ...], StageFn]]:
    """``[(stage name, attributes it owns, function)]`` in forward order; an error for unsupported models."""
    if _is_vit(model):
        return _vit_stages(model)
    if isinstance(model, nn.Sequential):
        return _sequential_stages(model)
    raise ConfigError(f"cannot split a {type(model).__name__}: split learning supports timm VisionTransformer "
                      f"models (ViT, DeiT, distilled DeiT) and nn.Sequential; wrap other models in nn.Sequential")


def stage_names(model: nn.Module) -> list[str]:
    return [name for name, _, _ in stages_of(model)]


def resolve_stage(model: nn.Module, ref: str | int, *, setting: str) -> int:
    """The index of stage ``ref`` (a name, or an index that may be negative); the error names ``setting``."""
    names = stage_names(model)
    if isinstance(ref, bool) or not isinstance(ref, (str, int)):
        raise ConfigError(f"{setting}={ref!r} must be a stage name or an index; stages: {', '.join(names)}")
    if isinstance(ref, int):
        if not -len(names) <= ref < len(names):
            raise ConfigError(f"{setting}={ref} is out of range for a model with {len(names)} stages "
                              f"(0..{len(names) - 1}): {', '.join(names)}")
        return ref % len(names)
    if ref not in names:
        raise ConfigError(f"{setting}={ref!r} is not a stage of this {type(model).__name__}; "
                          f"stages: {', '.join(names)}")
    return names.index(ref)


def _get(model: nn.Module, dotted: str) -> Any:
    obj: Any = model
    for part in dotted.split("."):
        obj = getattr(obj, part, None)
        if obj is None:
            return None
    return obj


class Segment(nn.Module):
    """Stages ``names`` of ``model``, under the model's own state-dict names.

    ``share=False`` (default) deep-copies the modules and parameters, giving an independent working copy;
    ``share=True`` references the model's own (a server segment that reads the global weights in place).
    ``parts`` names contiguous runs of stages (``{"bottom": (...), "top": (...)}``) for :meth:`run`.
    """

    def __init__(self, model: nn.Module, parts: Mapping[str, Sequence[str]], *, share: bool = False) -> None:
        super().__init__()
        table = {name: (owns, fn) for name, owns, fn in stages_of(model)}
        self.model_cls: Any = type(model)  # timm methods are called on the segment (see _embed)
        self.distilled = _is_distilled(model)
        self.parts = {k: tuple(v) for k, v in parts.items()}
        self._fns: dict[str, StageFn] = {}
        self._owns: dict[str, tuple[str, ...]] = {}
        for stage in (s for run in self.parts.values() for s in run):
            if stage not in table:
                raise ConfigError(f"unknown stage {stage!r}; stages: {', '.join(table)}")
            owns, fn = table[stage]
            self._fns[stage], self._owns[stage] = fn, owns
            for attr in owns:
                self._adopt(model, attr, share)
        for flag in _VIT_FLAGS:
            if flag in model.__dict__:
                setattr(self, flag, model.__dict__[flag])
        # timm's methods read these attributes even when the stage that owns them is elsewhere
        for attr in ("cls_token", "reg_token", "dist_token", "pos_embed", "attn_pool"):
            if _is_vit(model) and not hasattr(self, attr):
                object.__setattr__(self, attr, None)

    def _adopt(self, model: nn.Module, attr: str, share: bool) -> None:
        value = _get(model, attr)
        if value is None:
            return
        if not share:
            value = copy.deepcopy(value)
        if "." in attr:  # blocks.3: keep the container name and the index, so names stay "blocks.3...."
            parent, index = attr.rsplit(".", 1)
            if not hasattr(self, parent):
                self.add_module(parent, nn.Sequential())
            getattr(self, parent).add_module(index, value)
        elif isinstance(value, nn.Parameter):
            self.register_parameter(attr, value)
        else:
            self.add_module(attr, value)

    def run(self, part: str, x: torch.Tensor) -> torch.Tensor:
        """Run the stages of ``part`` in order."""
        for stage in self.parts[part]:
            x = self._fns[stage](self, x)
        return x

    def part_parameters(self, part: str) -> list[nn.Parameter]:
        """The parameters owned by the stages of ``part``."""
        out: list[nn.Parameter] = []
        for stage in self.parts[part]:
            for attr in self._owns[stage]:
                value = _get(self, attr)
                if isinstance(value, nn.Parameter):
                    out.append(value)
                elif isinstance(value, nn.Module):
                    out.extend(value.parameters())
        return out

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for part in self.parts:
            x = self.run(part, x)
        return x

    def stages(self) -> tuple[str, ...]:
        return tuple(s for run in self.parts.values() for s in run)


def split_layout(model: nn.Module, cut: str | int, tail_from: str | int | None) -> dict[str, tuple[str, ...]]:
    """``{"bottom", "server", "top"}`` stage names for a cut after stage ``cut`` and a client tail from ``tail_from``.

    ``tail_from=None`` is a two-part split: the client holds the bottom, the server the rest and the loss.
    Errors name the setting and list the stages when a cut does not exist or leaves a side empty.
    """
    names = stage_names(model)
    c = resolve_stage(model, cut, setting="cut")
    bottom = tuple(names[:c + 1])
    top: tuple[str, ...]
    if tail_from is None:
        server, top = tuple(names[c + 1:]), ()
    else:
        t = resolve_stage(model, tail_from, setting="tail_from")
        if t <= c:
            raise ConfigError(f"tail_from={tail_from!r} (stage {t}) must come after cut={cut!r} (stage {c}); "
                              f"stages: {', '.join(names)}")
        server, top = tuple(names[c + 1:t]), tuple(names[t:])
    if not server:
        raise ConfigError(f"cut={cut!r}, tail_from={tail_from!r} leaves the server with no stages; "
                          f"stages: {', '.join(names)}")
    return {"bottom": bottom, "server": server, "top": top}
