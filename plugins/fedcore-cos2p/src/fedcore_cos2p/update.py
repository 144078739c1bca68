"""The local-update slot of Co-S2P (Alg. 2): the mask phase (Eq. 2), then the weight phase (Eq. 3) with Adan.

Mask phase (rounds the share marks ``"mask"``): the weights are frozen; straight-through Bernoulli masks
over the held blocks (frozen prefix included) learn CE of the deepest exit plus λ1·|kept − R^width|.
The logits I stay in client state; their binarization, projected onto the budget, gives the submodel.
Weight phase: that submodel is sliced physically, the frozen prefix runs forward only, and the window
plus the client's personal exits train on Eq. 3's multi-exit self-distillation with ``timm.optim.Adan``.
Exits never leave the client except the deepest one's values, from which the server forms its eval head.
"""
from __future__ import annotations

from collections.abc import Sequence
import math
from typing import Any, ClassVar

import attrs
import torch
import torch.nn.functional as F

import fedcore
from fedcore import RoundContext
from fedcore.data import batches
from fedcore.errors import ConfigError
from fedcore.runtime import book_samples
from fedcore.settings import setting
from fedcore.types import ClientData, ClientInfo, ClientState, ClientUpdate, JobPlan, Share, upload_messages
from fedcore_cos2p.coords import zeros_like_global
from fedcore_cos2p.distill import DIRECTIONS, self_distillation_loss
from fedcore_cos2p.masks import PARTS, binarize, check_logits, initial_logits, kept_indices, kept_ratio, ste_sample
from fedcore_cos2p.share import LOGITS, weight_scores
from fedcore_cos2p.submodel import SUBMODEL, Cos2pSubmodel, submodel_of
from fedcore_pruning import BlockMasks, PrunableViT, SubmodelSpec, extract, scatter

EXITS = "cos2p.exit."  # client-state prefix of the personal exits, keyed by their offset inside the window


def _adan(params: Sequence[torch.Tensor], lr: float) -> torch.optim.Optimizer:
    """timm's Adan with its multi-tensor (foreach) step on every device: on the CPU timm would loop over the tensors
    in Python, ~12 calls per tensor per step; the foreach step is the same arithmetic op for op (the histories are
    bit-identical) with one call per op."""
    from timm.optim import Adan  # timm is a dependency of this plugin; imported on use, not at import time

    return Adan(params, lr=lr, foreach=True)


def _global(module: PrunableViT, spec: SubmodelSpec) -> dict[str, torch.Tensor]:
    """The module's held tensors in global coordinates (zeros where it holds nothing)."""
    sub = {k: v for k, v in module.state_dict().items() if not k.startswith("exits.")}
    state, _ = scatter(sub, spec, into=zeros_like_global(spec, module.cls_token.detach()))
    d, c = spec.shape.embed_dim, spec.shape.num_classes
    ref = module.cls_token.detach()
    # the final norm and head are never held; extract copies them into new exits, which are then overwritten
    return state | {"norm.weight": ref.new_ones(d), "norm.bias": ref.new_zeros(d),
                    "head.weight": ref.new_zeros(c, d), "head.bias": ref.new_zeros(c)}


@attrs.frozen(eq=False, kw_only=True)
class Cos2pUpdate:
    """Mask learning (Eq. 2, weights frozen) when the share asks for it, then self-distilled weight training."""

    loss_scaling: ClassVar[bool] = False
    """The mask and self-distillation loops have no loss scaling: precision = "fp16" is refused."""

    optimizer: ClassVar[str] = "adan"  # the clock's memory model counts its four state tensors per weight
    lr: float = setting(2e-3, low=0.0, low_open=True, help="η: Adan learning rate of the weight phase")
    epochs: int = setting(2, low=1, help="E: local epochs of the weight phase")
    batch_size: int = setting(16, low=1, help="minibatch size")
    mask_lr: float = setting(0.01, low=0.0, low_open=True, help="η̂: Adan learning rate of the mask logits")
    mask_epochs: int = setting(1, low=1, help="Ê: epochs of the mask phase")
    budget_weight: float = setting(1.0, low=0.0, help="λ1 of Eq. 2 (how tightly the budget is enforced)")
    kd_weight: float = setting(0.2, low=0.0, high=1.0, help="λ2 of Eq. 3 (0: no self-distillation)")
    temperature: float = setting(3.0, low=0.0, low_open=True, help="t of Eq. 3")
    kd_direction: str = setting("student_teacher", choices=DIRECTIONS, help="KL direction (paper: student‖teacher)")
    personal_exits: bool = setting(True, help="exits stay on the client across rounds (False: from the global head)")

    def mask_phase(self, module: PrunableViT, spec: SubmodelSpec, info: Cos2pSubmodel, data: ClientData,
                   state: ClientState, ctx: RoundContext) -> tuple[dict[str, torch.Tensor], float]:
        """Learn the logits of the held blocks (Eq. 2), store them, return the binarized global masks."""
        shape, blocks = spec.shape, spec.kept_depth
        fixed = {p: torch.zeros(blocks, n) for p, n in (("heads", shape.num_heads), ("hidden", shape.mlp_hidden),
                                                         ("attn_out", shape.embed_dim), ("mlp_out", shape.embed_dim))
                 if p in info.fixed}
        for p in fixed:
            for b, idx in enumerate(info.fixed[p]):
                fixed[p][b, list(idx)] = 1.0
        residual = info.residual_masks
        learned = [p for p in PARTS if p not in fixed and (residual or p in ("heads", "hidden"))]
        init = initial_logits(shape, info.mask_init)
        logits = {p: state.tensors.get(LOGITS + p, init[p]).clone().float() for p in PARTS}
        check_logits(logits, shape)
        held = {p: logits[p][:blocks].clone().requires_grad_(True) for p in learned}
        index = {p: [torch.tensor(getattr(k, p), dtype=torch.long) for k in spec.blocks] for p in learned}
        flags = [(param, param.requires_grad) for param in module.parameters()]
        for param, _ in flags:  # weights frozen while the masks learn (Alg. 2 line 8)
            param.requires_grad_(False)
        opt = _adan(list(held.values()), self.mask_lr)
        gen = ctx.rng("cos2p-mask")
        width, inputs = info.width, info.budget_counts_inputs
        last = 0.0
        for _ in range(self.mask_epochs):
            for x, y in batches(data.dataset, data.indices, self.batch_size, generator=gen):
                sampled = {p: ste_sample(held[p], gen) for p in learned}
                full = {p: torch.ones(blocks, logits[p].shape[1]) for p in PARTS} | fixed | sampled
                masks: list[BlockMasks | None] = [
                    BlockMasks(**{p: sampled[p][b][index[p][b]] for p in learned}) for b in range(blocks)]
                loss = F.cross_entropy(module.forward_all(x, masks)[-1], y)
                ratio = kept_ratio(full, shape, inputs=inputs, residual=residual)
                loss = loss + self.budget_weight * (ratio - width).abs()
                opt.zero_grad(set_to_none=True)
                loss.backward()
                opt.step()
                book_samples(module, len(y))  # forward_all is not module.forward: book the batch on the meter
                last = loss.item()
        for param, flag in flags:
            param.requires_grad_(flag)
        for p in learned:
            logits[p][:blocks] = held[p].detach()
        state.tensors.update({LOGITS + p: logits[p] for p in PARTS})
        probs = {p: torch.sigmoid(logits[p][:blocks]) for p in PARTS}
        scores = weight_scores(_global(module, spec), shape, blocks)
        return binarize(probs, shape, width, scores=scores, fixed=fixed, inputs=inputs, residual=residual), last

    def load_exits(self, sub: PrunableViT, start: int, state: ClientState) -> None:
        if not self.personal_exits:
            return
        own = sub.state_dict()
        saved = {}
        for name in own:
            if name.startswith("exits."):
                depth, leaf = name[len("exits."):].split(".", 1)
                key = f"{EXITS}{int(depth) - start}.{leaf}"
                if key in state.tensors and state.tensors[key].shape == own[name].shape:
                    saved[name] = state.tensors[key]
        if saved:
            sub.load_state_dict(saved, strict=False)

    def save_exits(self, sub: PrunableViT, start: int, state: ClientState) -> None:
        for name, value in sub.state_dict().items():
            if name.startswith("exits."):
                depth, leaf = name[len("exits."):].split(".", 1)
                state.tensors[f"{EXITS}{int(depth) - start}.{leaf}"] = value.detach().clone()

    @classmethod
    def __fedcore_checks__(cls) -> Any:  # how the contract checks build and run it (fedcore.testing.CheckPlan)
        from fedcore_cos2p.checks import check_plan

        return check_plan("local_update")

    @fedcore.hookimpl
    def fedcore_plan_job(self, client: ClientInfo, share: Share, samples: int, example: torch.Tensor,
                         ctx: RoundContext) -> JobPlan | None:
        """A dry run: the mask epochs (in a mask round) and the weight epochs, then the upload of the share.

        Both loops call ``forward_all``, not the share module's forward; they book every batch on the job's meter
        (:func:`fedcore.runtime.book_samples`), so the clock prices ``(mask epochs + epochs) x samples`` of training
        at the share's FLOPs per sample (a mask epoch, weights frozen and masks trained, is priced as a weight
        epoch)."""
        info = submodel_of(share.meta)
        if info is None:
            return None
        per_epoch = math.ceil(samples / self.batch_size)
        mask = self.mask_epochs if info.phase == "mask" else 0
        return JobPlan(messages=upload_messages(share), train_samples=(mask + self.epochs) * samples,
                       num_examples=samples,
                       steps=(mask + self.epochs) * per_epoch, batch_size=min(self.batch_size, max(samples, 1)))

    @fedcore.hookimpl
    def fedcore_local_update(self, client: ClientInfo, share: Share, data: ClientData, state: ClientState,
                             ctx: RoundContext) -> ClientUpdate:
        info = submodel_of(share.meta)
        if info is None:
            raise ConfigError("cos2p-update trains the submodels of cos2p-share; this share carries no Cos2pSubmodel "
                              "(use split = \"cos2p-share\")")
        module = share.module
        assert isinstance(module, PrunableViT)
        spec = module.spec
        metrics: dict[str, float] = {}
        sub = module
        if info.phase == "mask":
            masks, metrics["mask_loss"] = self.mask_phase(module, spec, info, data, state, ctx)
            kept = {p: [list(kept_indices(masks[p][b])) for b in range(spec.kept_depth)] for p in PARTS}
            trained = SubmodelSpec.build(spec.shape, window_start=spec.window_start,
                                         window_length=spec.window_length, **kept, classes=spec.classes,
                                         exits=spec.exits, head=False)
            sub = extract(_global(module, spec), trained)
            sub.load_state_dict({k: v for k, v in module.state_dict().items() if k.startswith("exits.")},
                                strict=False)
        else:
            trained = info.spec
        self.load_exits(sub, spec.window_start, state)
        params = [p for p in sub.parameters() if p.requires_grad]
        opt = _adan(params, self.lr)
        gen = ctx.rng("shuffle")
        total, count = 0.0, 0
        sub.train()
        for _ in range(self.epochs):
            for x, y in batches(data.dataset, data.indices, self.batch_size, generator=gen):
                loss = self_distillation_loss(sub.forward_all(x), y, kd_weight=self.kd_weight,
                                              temperature=self.temperature, direction=self.kd_direction)
                opt.zero_grad(set_to_none=True)
                loss.backward()
                opt.step()
                book_samples(module, len(y))  # on the share's module (``sub`` is a sliced copy of it in a mask round)
                total, count = total + loss.item() * len(y), count + len(y)
        self.save_exits(sub, spec.window_start, state)
        if sub is module:
            values = dict(module.state_dict())
        else:
            trained_state, _ = scatter({k: v for k, v in sub.state_dict().items() if not k.startswith("exits.")},
                                       trained, into=_global(module, spec))
            values = {**extract(trained_state, spec).state_dict(),
                      **{k: v for k, v in sub.state_dict().items() if k.startswith("exits.")}}
        metrics["loss"] = total / max(count, 1)
        return ClientUpdate.from_share(share, values, num_examples=len(data), metrics=metrics,
                                       meta={SUBMODEL: attrs.evolve(info, trained=trained)})

