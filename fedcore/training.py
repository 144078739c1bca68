"""The local training loop and optimizer factory every local update shares.

    loss = train_epochs(share.module, data, epochs=2, lr=0.05, generator=ctx.rng("shuffle"))

One loop, so that methods compared side by side differ only in what they say they differ in (the
share, the loss, a proximal term), never in a re-typed detail of the loop. Per batch: forward, loss
(cross-entropy by default), an optional FedProx term ``(mu/2)·||w − w_0||²`` anchored at the values
the module had when training started, backward, optional gradient-norm clipping, step. A fresh
optimizer every call: clients are stateless (and a LoRA rank change would reshape its state anyway).
"""
from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import attrs
import torch
from torch import nn

from fedcore.data.arrays import batches
from fedcore.errors import ConfigError
from fedcore.runtime.placement import active_placement
from fedcore.types import ClientData

OPTIMIZERS = ("sgd", "adam")
"""The names :func:`make_optimizer` accepts."""

LossFn = Callable[[nn.Module, torch.Tensor, torch.Tensor], torch.Tensor]
"""``loss(module, x, y) -> scalar tensor`` for one batch."""

GradHook = Callable[[int, list[nn.Parameter]], None]
"""``adjust_grads(step, params)``: change ``p.grad`` in place before the optimiser step (SCAFFOLD's control variates,
FedDyn's linear term). It sees true gradients: under fp16 loss scaling they are unscaled first."""


class TrainResult(float):
    """What :func:`train_epochs` returns: the mean loss (it *is* that float, so ``loss = train_epochs(...)`` code
    written before keeps working), with ``steps`` (optimiser steps taken) and ``samples`` (samples seen)."""

    steps: int
    samples: int

    def __new__(cls, loss: float, steps: int, samples: int) -> TrainResult:
        out = super().__new__(cls, loss)
        out.steps, out.samples = int(steps), int(samples)
        return out

    def __reduce__(self) -> tuple[Any, ...]:
        return (TrainResult, (float(self), self.steps, self.samples))

    @property
    def loss(self) -> float:
        return float(self)

    def __repr__(self) -> str:
        return f"TrainResult(loss={float(self)!r}, steps={self.steps}, samples={self.samples})"


@attrs.frozen(kw_only=True)
class TrainPlan:
    """The settings of one :func:`train_epochs` call, stated by a local update so a cohort trainer can run it.

    A local update that defines ``vectorised_plan(share) -> TrainPlan | None`` promises that, for that
    share, its ``fedcore_local_update`` is exactly ``loss = train_epochs(share.module, data,
    generator=ctx.rng("shuffle"), **plan.kwargs())`` followed by ``ClientUpdate.from_share(share,
    num_examples=len(data), metrics={"loss": loss})``. The ``vectorised`` cohort then trains many such clients
    at once (``None``: not this share; it runs one by one).
    """

    epochs: int
    lr: float
    optimizer: str = "sgd"
    momentum: float = 0.0
    weight_decay: float = 0.0
    batch_size: int = 32
    mu: float | None = None
    clip_norm: float = 0.0

    def kwargs(self) -> dict[str, Any]:
        return attrs.asdict(self)


class PlainSGD:
    """SGD with momentum and weight decay, step for step ``torch.optim.SGD``'s own CPU arithmetic (its
    single-tensor path: the same operations in the same order, so the same bits), without ``torch.optim``.

    Why: ``torch.optim.Optimizer`` imports ``torch._dynamo`` (and sympy) at its first ``add_param_group`` and
    every ``step``, about 1.2 s of CPU in each process, as much as ``import torch``: :func:`train_epochs` uses this
    for ``optimizer = "sgd"`` on the CPU without loss scaling (elsewhere torch may take its multi-tensor path), so
    a ``fedcore run`` of such a job never pays it. It has what
    the loop touches: ``param_groups`` (``lr`` per group, for ``lr_at``), ``zero_grad`` and ``step``.
    """

    def __init__(self, params: Iterable[nn.Parameter], lr: float, momentum: float = 0.0,
                 weight_decay: float = 0.0) -> None:
        self.param_groups: list[dict[str, Any]] = [{"params": list(params), "lr": lr, "momentum": momentum,
                                                    "weight_decay": weight_decay}]
        self.momentum_buffers: list[torch.Tensor | None] = [None] * len(self.param_groups[0]["params"])

    def zero_grad(self, set_to_none: bool = True) -> None:
        for p in self.param_groups[0]["params"]:
            if set_to_none:
                p.grad = None
            elif p.grad is not None:
                p.grad.detach_().zero_()

    @torch.no_grad()
    def step(self) -> None:
        group = self.param_groups[0]
        lr, momentum, decay = float(group["lr"]), group["momentum"], group["weight_decay"]
        for i, p in enumerate(group["params"]):
            grad = p.grad
            if grad is None:
                continue
            if decay != 0:
                grad = grad.add(p, alpha=decay)
            if momentum != 0:
                buf = self.momentum_buffers[i]
                if buf is None:
                    buf = self.momentum_buffers[i] = grad.detach().clone()
                else:
                    buf.mul_(momentum).add_(grad, alpha=1)
                grad = buf
            p.add_(grad, alpha=-lr)


def make_optimizer(name: str, params: Iterable[nn.Parameter], lr: float, momentum: float = 0.0,
                   weight_decay: float = 0.0) -> torch.optim.Optimizer:
    """``torch.optim.SGD`` (with ``momentum``) or ``torch.optim.Adam``; both with decoupled-free ``weight_decay``."""
    if name == "adam":
        return torch.optim.Adam(params, lr=lr, weight_decay=weight_decay)
    if name == "sgd":
        return torch.optim.SGD(params, lr=lr, momentum=momentum, weight_decay=weight_decay)
    raise ConfigError(f"optimizer={name!r} is not allowed; choose one of: {', '.join(OPTIMIZERS)}")


def cross_entropy(module: nn.Module, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """The default loss: cross-entropy of ``module(x)`` against the labels ``y``."""
    return nn.functional.cross_entropy(module(x), y)


def train_epochs(module: nn.Module, data: ClientData, *, epochs: int, lr: float, optimizer: str = "sgd",
                 momentum: float = 0.0, weight_decay: float = 0.0, batch_size: int = 32, mu: float | None = None,
                 clip_norm: float = 0.0, generator: torch.Generator | None = None, loss: LossFn = cross_entropy,
                 lr_at: Callable[[int], float] | None = None, adjust_grads: GradHook | None = None) -> TrainResult:
    """Train the parameters of ``module`` that require grad on ``data``, in place; returns the mean loss with the
    number of steps (a :class:`TrainResult`: a float with ``.steps`` and ``.samples``).

    ``generator`` shuffles the batches (draw it from ``ctx.rng("shuffle")``). ``mu=None`` adds no
    proximal term; ``mu=0.0`` adds it with weight zero. ``lr_at(step)`` sets the learning rate before each
    step (warm-up, cosine). Per step, after backward: ``adjust_grads(step, params)`` changes the gradients in
    place (a per-step gradient correction), then ``clip_norm > 0`` clips the gradient norm, then the optimiser
    steps. The returned mean is of ``loss`` alone, without the proximal term. Under ``precision = "fp16"`` the
    loss is scaled (``torch.amp.GradScaler``) and the gradients are unscaled before ``adjust_grads`` and clipping,
    so both see true gradients (on an overflow step they hold inf/nan and the scaler skips the step); bf16 and
    fp16 autocast come from the engine around client training.
    """
    params = [p for p in module.parameters() if p.requires_grad]
    if not params:
        raise ValueError(f"{type(module).__name__} has no trainable parameters (none requires grad)")
    module.train()
    scaler = active_placement().grad_scaler()  # fp16 only (the run's ``precision``)
    plain = optimizer == "sgd" and scaler is None and all(p.device.type == "cpu" for p in params)
    opt: Any = PlainSGD(params, lr, momentum, weight_decay) if plain \
        else make_optimizer(optimizer, params, lr, momentum, weight_decay)
    anchor = [p.detach().clone() for p in params] if mu is not None else None
    half_mu = 0.5 * float(mu) if mu is not None else 0.0
    losses: list[tuple[torch.Tensor, int]] = []  # read back once at the end: no GPU sync per step
    step = 0
    for _ in range(epochs):
        for x, y in batches(data.dataset, data.indices, batch_size, generator=generator):
            if lr_at is not None:
                for group in opt.param_groups:
                    group["lr"] = lr_at(step)
            value = loss(module, x, y)
            total: Any = value
            if anchor is not None:
                total = value + half_mu * sum(((p - a) ** 2).sum() for p, a in zip(params, anchor, strict=True))
            opt.zero_grad(set_to_none=True)
            if scaler is None:
                total.backward()
                if adjust_grads is not None:
                    adjust_grads(step, params)
                if clip_norm > 0:
                    nn.utils.clip_grad_norm_(params, clip_norm)
                opt.step()
            else:  # fp16: scaled loss, gradients unscaled before the hook and clipping, steps skipped on overflow
                scaler.scale(total).backward()
                if adjust_grads is not None or clip_norm > 0:
                    scaler.unscale_(opt)
                if adjust_grads is not None:
                    adjust_grads(step, params)
                if clip_norm > 0:
                    nn.utils.clip_grad_norm_(params, clip_norm)
                scaler.step(opt)
                scaler.update()
            losses.append((value.detach(), len(y)))
            step += 1
    loss_sum, seen = 0.0, 0
    if losses:  # summed in step order, as a running sum of float(value) * len(y) would be
        for value_f, n in zip(torch.stack([v for v, _ in losses]).tolist(), (n for _, n in losses)):
            loss_sum += float(value_f) * n
            seen += n
    return TrainResult(loss_sum / max(seen, 1), steps=step, samples=seen)


__all__ = ["OPTIMIZERS", "GradHook", "LossFn", "TrainPlan", "TrainResult", "cross_entropy", "make_optimizer",
           "train_epochs"]
