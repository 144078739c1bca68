"""The ``submodel-train`` local update: trains the client's extracted submodel, and only its window.

The share's module is the physically sliced ``PrunableViT``; its frozen prefix has ``requires_grad=False``
and runs under ``no_grad``, so only the trainable window costs gradients and optimizer states. The loss
is the mean cross-entropy over every output of the submodel (its exits by depth, then the global head);
a FedRolex or HeteroFL submodel has only the head. A submodel that keeps a subset of the classes is
trained on the samples of those classes, with labels renumbered to its output rows. The optimizer is
SGD, Adam or ``timm.optim.Adan`` (Co-S2P's), fresh every round like the core's ``sgd``.
"""
from __future__ import annotations

from typing import Any, ClassVar

import attrs
import torch
from torch import nn
import torch.nn.functional as F

import fedcore
from fedcore import RoundContext
from fedcore.data import batches
from fedcore.settings import setting
from fedcore.training import make_optimizer
from fedcore.types import ClientData, ClientUpdate, Share
from fedcore_pruning.aggregator import MaskedDelta
from fedcore_pruning.checks import vit_check_plan
from fedcore_pruning.share import SubmodelShare
from fedcore_pruning.vit import PrunableViT

OPTIMIZERS = ("sgd", "adam", "adan")


def submodel_loss(module: nn.Module, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor | None:
    """Mean cross-entropy over the submodel's outputs on the samples of its kept classes (``None``: no such sample)."""
    if isinstance(module, PrunableViT):
        classes = module.spec.classes
        if len(classes) < module.shape.num_classes:
            lookup = torch.full((module.shape.num_classes,), -1, dtype=torch.long)
            lookup[list(classes)] = torch.arange(len(classes))
            y = lookup[y]
            keep = y >= 0
            if not bool(keep.any()):
                return None
            x, y = x[keep], y[keep]
        outputs = module.forward_all(x)
    else:
        outputs = [module(x)]
    return torch.stack([F.cross_entropy(out, y) for out in outputs]).mean()


@attrs.frozen(eq=False, kw_only=True)
class SubmodelTrain:
    """Local update slot: minibatch training of the extracted submodel's trainable window (SGD, Adam or Adan)."""

    loss_scaling: ClassVar[bool] = False
    """The submodel loop has no loss scaling: precision = "fp16" is refused."""

    lr: float = setting(0.002, low=0.0, low_open=True, help="learning rate")
    epochs: int = setting(1, low=1, help="local epochs")
    batch_size: int = setting(32, low=1, help="minibatch size")
    optimizer: str = setting("adam", choices=OPTIMIZERS, help="local optimizer (adan: timm.optim.Adan)")
    momentum: float = setting(0.0, low=0.0, high=1.0, high_open=True, help="SGD momentum")
    weight_decay: float = setting(0.0, low=0.0, help="weight decay of the optimizer")

    @fedcore.hookimpl
    def fedcore_local_update(self, client: Any, share: Share, data: ClientData, state: Any,
                             ctx: RoundContext) -> ClientUpdate:
        module = share.module
        params = [p for p in module.parameters() if p.requires_grad]
        if not params:
            raise ValueError(f"{type(module).__name__} has no trainable parameters (none requires grad)")
        module.train()
        if self.optimizer == "adan":  # fedcore.training.make_optimizer knows sgd and adam only
            from timm.optim import Adan

            opt: torch.optim.Optimizer = Adan(params, lr=self.lr, weight_decay=self.weight_decay)
        else:
            opt = make_optimizer(self.optimizer, params, self.lr, self.momentum, self.weight_decay)
        total, seen = 0.0, 0
        generator = ctx.rng("shuffle")
        for _ in range(self.epochs):
            for x, y in batches(data.dataset, data.indices, self.batch_size, generator=generator):
                loss = submodel_loss(module, x, y)
                if loss is None:
                    continue
                opt.zero_grad(set_to_none=True)
                loss.backward()
                opt.step()
                total += float(loss.detach()) * len(y)
                seen += len(y)
        metrics = {"loss": total / seen} if seen else {}
        return ClientUpdate.from_share(share, num_examples=len(data), metrics=metrics)

    @classmethod
    def __fedcore_checks__(cls) -> Any:  # trains a sliced ViT: needs the share that slices it
        return vit_check_plan(cls(), SubmodelShare(widths=(1.0, 0.5)), MaskedDelta())
