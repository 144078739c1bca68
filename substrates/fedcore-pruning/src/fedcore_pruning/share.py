"""The ``submodel-share`` split: each client gets a physically sliced width-submodel of the global ViT.

A client's budget is a width ratio β in (0, 1]: from its device tier (``tier_widths[client.profile]``) or
else ``widths[client.id mod len(widths)]``. A named index rule picks which ``ceil(βK)`` heads and MLP
hidden units per block it keeps: ``rolling`` is FedRolex (a window that moves one unit per global round,
so every unit trains equally often), ``prefix`` is HeteroFL (always the first units). Depth, the residual
stream, the embeddings and the head stay whole, so every client trains the full depth.

The share's ``meta["submodel"]`` is the spec's index map; it travels with the update (also while stale)
to an aggregator that declares ``merges`` with ``Upload.SUBMODEL`` (``masked-delta``), and is refused with any
other when the pipeline is built (``fedcore.types.Upload``).
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

import attrs
from torch import nn

import fedcore
from fedcore import RoundContext
from fedcore.errors import ConfigError
from fedcore.settings import setting
from fedcore.types import ClientInfo, Share, Upload
from fedcore_pruning.aggregator import MaskedDelta
from fedcore_pruning.checks import vit_check_plan
from fedcore_pruning.rules import IndexRule, check_width_keeps_a_head, prefix_indices, rolling_indices, width_spec
from fedcore_pruning.shape import ViTShape
from fedcore_pruning.slicing import extract, trainable_names
from fedcore_pruning.spec import SubmodelSpec
from fedcore_pruning.updates import SUBMODEL_META

INDEX_RULES: Mapping[str, IndexRule] = {"rolling": rolling_indices, "prefix": prefix_indices}
"""The named index rules: ``rolling`` (FedRolex) and ``prefix`` (HeteroFL)."""


def _check_width(field: str, value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.0 < value <= 1.0:
        raise ConfigError(f"{field}={value!r} is a budget outside (0, 1]; a width ratio must be in (0, 1]")


@attrs.frozen(eq=False, kw_only=True)
class SubmodelShare:
    """Split slot: a sliced width-submodel per client, sized by its budget and chosen by an index rule.

    ``rule = "rolling"`` is FedRolex, ``rule = "prefix"`` HeteroFL. Needs a ViT global model (a timm
    ``VisionTransformer`` or a ``PrunableViT``) and an aggregator that merges submodels (``masked-delta``).
    """

    uploads: ClassVar[Upload] = Upload.SUBMODEL
    """Physically sliced submodels, their index map in ``meta["submodel"]``."""

    rule: str = setting("rolling", choices=tuple(INDEX_RULES),
                        help="which units a client keeps: rolling (FedRolex) or prefix (HeteroFL)")
    widths: tuple = setting((1.0, 0.5, 0.25), kind=tuple,
                            help="width ratio (budget) per client, in (0, 1], cycled by client id")
    tier_widths: dict = setting({}, kind=dict,
                                help="width ratio per device profile (tier); a client with a listed profile uses it")

    def __attrs_post_init__(self) -> None:
        if not self.widths:
            raise ConfigError("SubmodelShare.widths is empty; give at least one width ratio in (0, 1]")
        for i, w in enumerate(self.widths):
            _check_width(f"SubmodelShare.widths[{i}]", w)
        for tier, w in self.tier_widths.items():
            if not isinstance(tier, str):
                raise ConfigError(f"SubmodelShare.tier_widths key {tier!r} must be a device profile name")
            _check_width(f"SubmodelShare.tier_widths[{tier!r}]", w)

    def width_of(self, client: ClientInfo) -> float:
        """The client's budget: its tier's width, else ``widths[id mod len(widths)]``."""
        if client.profile is not None and client.profile in self.tier_widths:
            return float(self.tier_widths[client.profile])
        return float(self.widths[client.id % len(self.widths)])

    def spec_for(self, shape: ViTShape, client: ClientInfo, round: int) -> SubmodelSpec:
        """The submodel ``client`` trains in global round ``round``."""
        width = self.width_of(client)
        check_width_keeps_a_head(shape, width)
        return width_spec(shape, width, INDEX_RULES[self.rule], round)

    @fedcore.hookimpl
    def fedcore_split_model(self, model: nn.Module, client: ClientInfo, state: Any, ctx: RoundContext) -> Share:
        spec = self.spec_for(ViTShape.of(model), client, ctx.round)
        module = extract(model, spec)
        names = list(module.state_dict())
        upload = tuple(n for n in names if n in trainable_names(spec))
        return Share(module=module, download=tuple(n for n in names if not n.startswith("exits.")), upload=upload,
                     meta={SUBMODEL_META: spec.to_data(), "width": self.width_of(client), "rule": self.rule})

    @classmethod
    def __fedcore_checks__(cls) -> Any:  # a ViT to slice, and the aggregator that merges slices
        return vit_check_plan(cls(widths=(1.0, 0.5)), MaskedDelta())
