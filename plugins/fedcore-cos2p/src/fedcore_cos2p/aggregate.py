"""The aggregate slot of Co-S2P: Eq. 4 segment weights and the Eq. 5 element-wise merge (Sec. 4.3, Alg. 1).

    γ_u^i = ‖Δ_u^i‖₁ / (‖w_q^i − w_{q−τ_u}^i‖₁ + size(w^i))                       (Eq. 4)
    w(e) ← w(e) − η_s Σ_u m_u(e) γ_u^{seg(e)} Δ_u(e) / Σ_u m_u(e) γ_u^{seg(e)}     (Eq. 5)

Δ_u = w_start − w_end in global coordinates (the client's upload scattered back through the spec of the
``Cos2pSubmodel`` in its meta), m_u the elements it trained, w_{q−τ} the model it was sent (its ``base``); norms
and sizes run over the client's trained elements of the segment (spec 004 §1.6). Segments: a head's qkv rows, one
output row of proj / fc1 / fc2, every other tensor whole. ``weighting="uniform"`` is the FedRolex /
HeteroFL count average; an update without a submodel description is a whole-model update. The
final ``norm`` + ``head`` are an eval-only head: the sample-weighted mean of every client's latest
deepest exit (§1.7). Every update is validated before anything is merged.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
import math
from typing import Any, ClassVar

import attrs
import torch
from torch import nn

import fedcore
from fedcore import RoundContext
from fedcore.errors import ConfigError
from fedcore.settings import setting
from fedcore.stash import StashKey
from fedcore.types import AggregateResult, ClientUpdate, TensorDict, Upload
from fedcore_cos2p.coords import check_same_model, shape_of, trained_mask, zeros_like_global
from fedcore_cos2p.submodel import submodel_of
from fedcore_pruning import SubmodelMismatchError, ViTShape, masked_weighted_delta, scatter

EVAL_HEADS: StashKey[dict[str, dict[str, Any]]] = StashKey("cos2p.eval_heads")
HEAD_LEAVES = ("norm.weight", "norm.bias", "head.weight", "head.bias")
STALENESS = ("none", "fedbuff")


def segment_ids(name: str, shape: tuple[int, ...], vit: ViTShape) -> tuple[torch.Tensor, int]:
    """Segment of every element of global tensor ``name`` and the number of segments (spec §1.6 decision)."""
    if name.endswith(("attn.qkv.weight", "attn.qkv.bias")):
        rows = (torch.arange(shape[0]) % vit.embed_dim) // vit.head_dim
        n = vit.num_heads
    elif name.endswith(("attn.proj.weight", "attn.proj.bias", "mlp.fc1.weight", "mlp.fc1.bias",
                        "mlp.fc2.weight", "mlp.fc2.bias")):
        rows, n = torch.arange(shape[0]), shape[0]
    else:
        return torch.zeros(shape, dtype=torch.long), 1
    return rows.view(-1, *([1] * (len(shape) - 1))).expand(shape), n


def gamma(delta: torch.Tensor, drift: torch.Tensor, mask: torch.Tensor, segments: torch.Tensor, n: int
          ) -> torch.Tensor:
    """Eq. 4 per element: its segment's ‖Δ‖₁ / (‖drift‖₁ + size) over the trained elements (0 where none)."""
    m = mask.to(delta.dtype).flatten()
    seg = segments.flatten().to(delta.device)  # index_add_ takes its index on the tensor's device (a GPU run's)
    num = delta.new_zeros(n).index_add_(0, seg, delta.abs().flatten() * m)
    den = delta.new_zeros(n).index_add_(0, seg, drift.abs().flatten() * m + m)
    per = torch.where(den > 0, num / torch.where(den > 0, den, torch.ones_like(den)), torch.zeros_like(den))
    return per[segments]


@attrs.frozen(kw_only=True, eq=False)
class GlobalUpdate:
    """One client's update in global coordinates."""

    delta: TensorDict
    mask: dict[str, torch.Tensor]
    base: TensorDict
    staleness: int


def to_global(update: ClientUpdate, global_state: Mapping[str, torch.Tensor], vit: ViTShape) -> GlobalUpdate:
    """The update's Δ, trained-element mask and base in global coordinates; a mismatch is one error."""
    info = submodel_of(update.meta)
    if info is None:  # a whole-model update: every entry it sends
        names = [k for k in update.tensors if k in update.base]
        for k in names:
            if k not in global_state or update.tensors[k].shape != global_state[k].shape:
                raise SubmodelMismatchError(
                    f"the update of client {update.client_id} carries no Co-S2P submodel description (Cos2pSubmodel) "
                    f"and its entry {k} does not fit the global model; pair cos2p-aggregate with cos2p-share")
        return GlobalUpdate(delta={k: update.base[k] - update.tensors[k] for k in names},
                            mask={k: torch.ones_like(update.tensors[k], dtype=torch.bool) for k in names},
                            base={k: update.base[k] for k in names}, staleness=int(update.staleness))
    sent, trained = info.checked(vit).spec, info.trained_spec
    check_same_model(sent, global_state)
    names = [k for k in update.tensors if not k.startswith("exits.")]
    lacking = [k for k in names if k not in update.base]
    if lacking:
        raise SubmodelMismatchError(f"the update of client {update.client_id} has no base for {lacking[:4]}")
    delta_sub = {k: update.base[k] - update.tensors[k] for k in names}
    if info.global_coordinates:
        for k, v in delta_sub.items():
            if k not in global_state or v.shape != global_state[k].shape:
                raise SubmodelMismatchError(f"the update of client {update.client_id}: {k} does not fit the global "
                                            "model")
        delta, base = delta_sub, {k: update.base[k] for k in names}
    else:
        delta, written = scatter(delta_sub, sent, into=zeros_like_global(sent, global_state["cls_token"]))
        delta = {k: delta[k] for k in written}
        full, _ = scatter({k: update.base[k] for k in names}, sent, into=global_state)
        base = {k: full[k] for k in names}
    mask = {k: m for k, m in trained_mask(trained, global_state).items() if k in delta}
    return GlobalUpdate(delta={k: delta[k] for k in mask}, mask=mask, base=base, staleness=int(update.staleness))


@attrs.frozen(eq=False, kw_only=True)
class Cos2pAggregate:
    """Staleness- and magnitude-aware element-wise merge of submodel deltas, plus the eval-only head."""

    merges: ClassVar[Upload] = Upload.SUBMODEL
    """Co-S2P's sliced submodels (a ``Cos2pSubmodel`` in the meta), mapped back to global coordinates."""

    weighting: str = setting("gamma", choices=("gamma", "uniform", "samples"),
                             help="Eq. 4 γ (Co-S2P), per-element count average (FedRolex/HeteroFL) or sample counts")
    staleness: str = setting("none", choices=STALENESS,
                             help="extra staleness factor on γ: none (paper) or fedbuff 1/sqrt(1+τ)")
    server_lr: float = setting(1.0, low=0.0, low_open=True, help="η_s of Eq. 5")

    def rule(self, updates: Sequence[GlobalUpdate], global_state: Mapping[str, torch.Tensor], vit: ViTShape
             ) -> Any:
        def weights(name: str, w: torch.Tensor, deltas: list[torch.Tensor], masks: list[torch.Tensor],
                    _: list[float]) -> list[torch.Tensor]:
            holders = [u for u in updates if name in u.mask]
            seg, n = segment_ids(name, tuple(w.shape), vit)
            out = []
            for u, d, m in zip(holders, deltas, masks):
                g = gamma(d, w - u.base[name].to(w.dtype), m, seg, n)
                if self.staleness == "fedbuff":
                    g = g / math.sqrt(1 + u.staleness)
                out.append(g)
            return out
        return weights

    @classmethod
    def __fedcore_checks__(cls) -> Any:  # how the contract checks build and run it (fedcore.testing.CheckPlan)
        from fedcore_cos2p.checks import check_plan

        return check_plan("aggregate")

    @fedcore.hookimpl
    def fedcore_check_pipeline(self, pipeline: fedcore.Pipeline) -> None:
        """It reads Co-S2P's submodel description (``Cos2pSubmodel``), which only ``cos2p-share`` writes."""
        from fedcore_cos2p.share import Cos2pShare

        split = pipeline.provider("split")
        if not isinstance(split, Cos2pShare):
            raise ConfigError(f"aggregate 'cos2p-aggregate' merges Co-S2P submodels, which split "
                              f"{type(split).__name__} does not upload; use split = \"cos2p-share\"")

    @fedcore.hookimpl
    def fedcore_aggregate(self, model: nn.Module, updates: Sequence[ClientUpdate], ctx: RoundContext
                          ) -> AggregateResult:
        vit = shape_of(model)
        global_state = model.state_dict()
        converted = [to_global(u, global_state, vit) for u in updates]  # every update checked before any merge
        pairs = [(u.delta, u.mask) for u in converted]
        rule = self.rule(converted, global_state, vit) if self.weighting == "gamma" else self.weighting
        state = masked_weighted_delta(global_state, pairs, [u.num_examples for u in updates], rule=rule,
                                      server_lr=self.server_lr)
        state |= self.eval_head(updates, ctx)
        return AggregateResult(state=state, metrics=self.metrics(converted, global_state, vit))

    def eval_head(self, updates: Sequence[ClientUpdate], ctx: RoundContext) -> TensorDict:
        """norm + head = sample-weighted mean of every client's latest deepest exit (spec §1.7)."""
        stored = ctx.server.stash.get(EVAL_HEADS)
        heads = dict(stored) if stored is not None else {}
        for u in updates:
            info = submodel_of(u.meta)
            if info is None:
                continue
            prefix = f"exits.{info.teacher}."
            if all(prefix + leaf in u.tensors for leaf in HEAD_LEAVES):
                heads[str(u.client_id)] = {"n": int(u.num_examples),
                                           **{leaf: u.tensors[prefix + leaf].detach().clone() for leaf in HEAD_LEAVES}}
        ctx.server.stash[EVAL_HEADS] = heads
        if not heads:
            return {}
        total = sum(h["n"] for h in heads.values())
        return {leaf: sum(h[leaf] * (h["n"] / total) for h in heads.values()) for leaf in HEAD_LEAVES}

    def metrics(self, updates: Sequence[GlobalUpdate], global_state: Mapping[str, torch.Tensor], vit: ViTShape
                ) -> dict[str, float]:
        """Staleness histogram, N* (least coverage of a block element) and the spread of the mean γ per update."""
        out: dict[str, float] = {}
        for u in updates:
            key = f"staleness_{u.staleness}"
            out[key] = out.get(key, 0.0) + 1.0
        coverage = min((int(torch.stack([u.mask[name] for u in updates if name in u.mask]).sum(0).min())
                        if any(name in u.mask for u in updates) else 0)
                       for name in global_state if name.startswith("blocks."))
        out["coverage_min"] = float(coverage)
        means = []
        for u in updates:
            num = sum(float(u.delta[k][u.mask[k]].abs().sum()) for k in u.mask)
            drift = sum(float((global_state[k] - u.base[k])[u.mask[k]].abs().sum()) for k in u.mask)
            size = sum(int(u.mask[k].sum()) for k in u.mask)
            means.append(num / (drift + size) if size else 0.0)
        if means and min(means) > 0:
            out["gamma_spread"] = max(means) / min(means)
        return out
