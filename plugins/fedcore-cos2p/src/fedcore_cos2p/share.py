"""The split slot of Co-S2P: each client's structured submodel of the global ViT (Sec. 4.1, Alg. 2).

Depth: a rolling window of k_n trainable blocks over a frozen prefix (``rolling_window_start``), the
deeper blocks removed. Width, by ``width``:

* ``"learned"`` (Co-S2P): during the first ``mask_rounds`` rounds the window is sent at full width and
  the client learns its masks (the local update's mask phase); afterwards the server slices the client's
  binarized masks (its logits, kept in client state, projected onto R^width) out of the global model;
* ``"rolling"`` (FedRolex) and ``"prefix"`` (HeteroFL) index rules over heads and MLP units, at full depth
  with ``depth="full"`` (their own baselines at equal trainable-parameter budget, see the README).

``random_masks`` replaces learned parts by fixed random masks (Tab. 3's ablation). The share's meta carries
a :class:`~fedcore_cos2p.submodel.Cos2pSubmodel` (the dispatched spec, the phase, the mask settings); a stale
update is mapped back to global coordinates by :meth:`fedcore_adapt_update`, because the global model's shapes
are not the submodel's.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

import attrs
import torch
from torch import nn

import fedcore
from fedcore import RoundContext
from fedcore.errors import ConfigError
from fedcore.settings import setting
from fedcore.types import ClientInfo, ClientState, ClientUpdate, DropUpdate, Share, Upload
from fedcore_cos2p.budgets import ClientBudget, check_budget
from fedcore_cos2p.coords import shape_of, zeros_like_global
from fedcore_cos2p.masks import PARTS, binarize, check_logits, initial_logits, kept_indices, random_masks
from fedcore_cos2p.submodel import SUBMODEL, Cos2pSubmodel, submodel_of
from fedcore_pruning import (
    SubmodelSpec,
    ViTShape,
    extract,
    kept_count,
    prefix_indices,
    rolling_indices,
    rolling_window_start,
    scatter,
    trainable_names,
)

LOGITS = "cos2p.logits."  # client-state tensor prefix of the mask logits I (one (depth, units) tensor per part)
RANDOM_PARTS = {"none": (), "linear": ("hidden", "attn_out", "mlp_out"), "msa": ("heads",),
                "both": ("heads", "hidden", "attn_out", "mlp_out")}


def _budgets(value: Mapping[str, Any]) -> dict[str, float]:
    if not isinstance(value, Mapping):
        raise ConfigError(f"Cos2pShare.budgets={value!r} must be a table of device profile -> budget in (0, 1]")
    return {str(k): check_budget(f"Cos2pShare.budgets[{k!r}]", v) for k, v in value.items()}


def weight_scores(state: Mapping[str, torch.Tensor], shape: ViTShape, blocks: int) -> dict[str, torch.Tensor]:
    """L1 norm of each segment's weights (ties of the mask probabilities are broken by it, spec §7.7), on the CPU
    beside the mask logits whatever device the weights are on."""
    def per(name: str) -> torch.Tensor:
        return torch.stack([state[f"blocks.{b}.{name}"].abs().sum(1) for b in range(blocks)]).float().cpu()

    heads = per("attn.qkv.weight").reshape(blocks, 3, shape.num_heads, shape.head_dim).sum((1, 3))
    return {"heads": heads, "hidden": per("mlp.fc1.weight"), "attn_out": per("attn.proj.weight"),
            "mlp_out": per("mlp.fc2.weight")}


def tie_break_scores(shape: ViTShape, blocks: int, seed: int) -> dict[str, torch.Tensor]:
    """Seeded random tie-breaks for equal mask probabilities, so the pruning spreads over the held blocks as learned
    masks do: what the cost report uses, and a dry run, whose global model has no weights to score (meta)."""
    gen = torch.Generator().manual_seed(seed)
    return {p: torch.rand((blocks, t.shape[1]), generator=gen) for p, t in initial_logits(shape, 0.0).items()}


@attrs.frozen(eq=False, kw_only=True)
class Cos2pShare:
    """Rolling depth window plus structured width per client, sized by the client's resource budget R_n."""

    uploads: ClassVar[Upload] = Upload.SUBMODEL
    """Sliced submodels (described by the meta's ``Cos2pSubmodel``): only a submodel aggregator merges them."""

    budgets: dict[str, float] = attrs.field(factory=dict, converter=_budgets, metadata={
        "help": "device profile -> resource budget R_n in (0, 1] (the paper's Tab. 7)", "kind": dict})
    budget: float = setting(0.25, low=0.0, high=1.0, low_open=True,
                            help="R_n of a client whose device profile is not in budgets")
    ratio: float = setting(1.0, low=0.0, low_open=True, help="R^width / R^depth (Tab. 8; 1 in the paper)")
    width: str = setting("learned", choices=("learned", "rolling", "prefix"),
                         help="learned masks (Co-S2P), FedRolex rolling or HeteroFL prefix indices")
    depth: str = setting("window", choices=("window", "full"),
                         help="rolling window of k_n blocks (Co-S2P) or every block (FedRolex, HeteroFL)")
    depth_roll: str = setting("global_round", choices=("global_round", "static"),
                              help="window start (q-1)*roll_step mod (L-k+1), or static_start every round")
    roll_step: int = setting(1, low=0, help="blocks the window slides per round")
    static_start: int = setting(0, low=0, help="window start with depth_roll = 'static'")
    mask_rounds: int = setting(8, low=0, help="Q̂: rounds whose clients learn masks (full-width window)")
    mask_init: float = setting(3.0, help="initial mask logit I0 (sigmoid(3) = 0.95)")
    residual_masks: bool = setting(True, help="also mask the output rows of attn.proj and mlp.fc2")
    budget_counts_inputs: bool = setting(True, help="Eq. 2 counts kept inputs of proj and fc2 too")
    random_masks: str = setting("none", choices=tuple(RANDOM_PARTS),
                                help="ablation: fixed random masks for linear layers, MSA heads or both")

    def budget_of(self, client: ClientInfo) -> float:
        return self.budgets.get(client.profile or "", self.budget)

    def plan(self, shape: ViTShape, client: ClientInfo, population: list[ClientInfo]) -> ClientBudget:
        field = f"Cos2pShare.budgets[{client.profile!r}]" if client.profile in self.budgets else "Cos2pShare.budget"
        return ClientBudget.plan(shape, self.budget_of(client), ratio=self.ratio,
                                 population=[self.budget_of(c) for c in population] or [self.budget_of(client)],
                                 field=field)

    def window(self, shape: ViTShape, k: int, round: int) -> tuple[int, int]:
        """(start, length) of the trainable window in 1-based round ``round``."""
        if self.depth == "full":
            return 0, shape.depth
        if self.depth_roll == "static":
            if self.static_start + k > shape.depth:
                raise ConfigError(f"Cos2pShare.static_start={self.static_start} with a window of {k} blocks lies "
                                  f"beyond the model's depth {shape.depth}")
            return self.static_start, k
        return rolling_window_start(shape.depth, k, round, self.roll_step), k

    def learns_masks(self) -> bool:
        """Whether any part's mask is learned: with fixed random masks on every masked part (``random_masks =
        "both"``) there is nothing to learn, so no round is a mask round and the fixed masks slice from round 1."""
        fixed = RANDOM_PARTS[self.random_masks]
        return any(p not in fixed and (self.residual_masks or p in ("heads", "hidden")) for p in PARTS)

    def fixed_masks(self, shape: ViTShape, width: float, seed: int, client: int) -> dict[str, torch.Tensor]:
        parts = RANDOM_PARTS[self.random_masks]
        if not parts:
            return {}
        gen = torch.Generator().manual_seed(seed * 1_000_003 + client)  # fixed per client for the whole run
        return random_masks(shape, width, parts, gen)

    def kept_sets(self, shape: ViTShape, plan: ClientBudget, blocks: int, round: int, state: ClientState,
                  global_state: Mapping[str, torch.Tensor], fixed: Mapping[str, torch.Tensor], seed: int = 0
                  ) -> tuple[str, dict[str, list[list[int]]]]:
        """The phase and the kept units per part and held block, in global indices."""
        if self.width != "learned":
            rule = rolling_indices if self.width == "rolling" else prefix_indices
            sizes = {"heads": shape.num_heads, "hidden": shape.mlp_hidden}
            kept = {p: list(rule(n, kept_count(n, plan.budget), round - 1)) for p, n in sizes.items()}
            full = list(range(shape.embed_dim))
            return "weight", {"heads": [kept["heads"]] * blocks, "hidden": [kept["hidden"]] * blocks,
                              "attn_out": [full] * blocks, "mlp_out": [full] * blocks}
        if round <= self.mask_rounds and self.learns_masks():
            masks = {p: torch.ones(blocks, n) for p, n in
                     (("heads", shape.num_heads), ("hidden", shape.mlp_hidden), ("attn_out", shape.embed_dim),
                      ("mlp_out", shape.embed_dim))}
            masks |= {p: m[:blocks] for p, m in fixed.items()}
            return "mask", {p: [list(kept_indices(masks[p][b])) for b in range(blocks)] for p in PARTS}
        logits = {p: state.tensors.get(LOGITS + p, initial_logits(shape, self.mask_init)[p]) for p in PARTS}
        check_logits(logits, shape)
        probs = {p: torch.sigmoid(logits[p][:blocks].float()) for p in PARTS}
        meta = next(iter(global_state.values())).is_meta  # a dry run: shapes only, no weights to score
        scores = tie_break_scores(shape, blocks, seed) if meta else weight_scores(global_state, shape, blocks)
        masks = binarize(probs, shape, plan.width, scores=scores,
                         fixed={p: m[:blocks] for p, m in fixed.items()}, inputs=self.budget_counts_inputs,
                         residual=self.residual_masks)
        return "weight", {p: [list(kept_indices(masks[p][b])) for b in range(blocks)] for p in PARTS}

    @classmethod
    def __fedcore_checks__(cls) -> Any:  # how the contract checks build and run it (fedcore.testing.CheckPlan)
        from fedcore_cos2p.checks import check_plan

        return check_plan("split")

    @fedcore.hookimpl
    def fedcore_split_model(self, model: nn.Module, client: ClientInfo, state: ClientState,
                            ctx: RoundContext) -> Share:
        shape = shape_of(model)
        population = list(ctx.run.clients) if ctx.run is not None else []
        plan = self.plan(shape, client, population)
        q = ctx.round + 1
        start, length = self.window(shape, plan.window, q)
        blocks = start + length
        global_state = model.state_dict()
        seed = ctx.run.seed if ctx.run is not None else ctx.seed
        fixed = self.fixed_masks(shape, plan.width, seed, client.id)
        phase, kept = self.kept_sets(shape, plan, blocks, q, state, global_state, fixed, seed)
        offsets = plan.offsets if self.depth == "window" else (shape.depth,)
        spec = SubmodelSpec.build(shape, window_start=start, window_length=length,
                                  heads=kept["heads"], hidden=kept["hidden"], attn_out=kept["attn_out"],
                                  mlp_out=kept["mlp_out"],
                                  exits=[start + o for o in offsets if start + o <= shape.depth], head=False)
        module = extract(global_state, spec)
        names = tuple(module.state_dict())
        download = tuple(n for n in names if not n.startswith("exits."))
        teacher = f"exits.{spec.exits[-1]}."
        upload = tuple(sorted(trainable_names(spec))) + tuple(n for n in names if n.startswith(teacher))
        sent = Cos2pSubmodel(spec=spec, phase=phase, budget=plan.budget, width=plan.width,
                             offsets=[spec.exits[i] - start for i in range(len(spec.exits))], teacher=spec.exits[-1],
                             residual_masks=self.residual_masks, budget_counts_inputs=self.budget_counts_inputs,
                             mask_init=self.mask_init,
                             fixed={p: [kept_indices(m[b]) for b in range(blocks)] for p, m in fixed.items()})
        return Share(module=module, download=download, upload=upload, meta={SUBMODEL: sent},
                     signature=f"cos2p:{phase}:{start}+{length}")

    @fedcore.hookimpl
    def fedcore_check_pipeline(self, pipeline: fedcore.Pipeline) -> None:
        """Co-S2P's submodels (``Cos2pSubmodel``) are not ``fedcore_pruning``'s: only its own aggregator reads them."""
        from fedcore_cos2p.aggregate import Cos2pAggregate

        aggregator = pipeline.provider("aggregate")
        if not isinstance(aggregator, Cos2pAggregate):
            raise ConfigError(f"split 'cos2p-share' uploads Co-S2P submodels, which aggregate "
                              f"{type(aggregator).__name__} cannot merge; use aggregate = \"cos2p-aggregate\"")

    @fedcore.hookimpl
    def fedcore_adapt_update(self, update: ClientUpdate, model: nn.Module, ctx: RoundContext
                             ) -> ClientUpdate | DropUpdate | None:
        """A stale submodel update in global coordinates (the aggregator reads either), so it is not dropped."""
        info = submodel_of(update.meta)
        if info is None or info.global_coordinates:
            return None
        spec = info.checked(shape_of(model)).spec
        own = model.state_dict()

        def to_global(values: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
            sub = {k: v for k, v in values.items() if not k.startswith("exits.")}
            zeros = zeros_like_global(spec, own["cls_token"])
            state, written = scatter(sub, spec, into=zeros)
            return {k: state[k] for k in written}

        tensors = to_global(update.tensors) | {k: v for k, v in update.tensors.items() if k.startswith("exits.")}
        return attrs.evolve(update, tensors=tensors, base=to_global(update.base),
                            meta={**update.meta, SUBMODEL: attrs.evolve(info, global_coordinates=True)})

