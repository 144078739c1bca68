"""Local SGD with a linear term in the loss: the gradient correction SCAFFOLD and FedDyn add to every step.

``L(w) + <g, w>`` has gradient ``∇L(w) + g``, so training on it with fedcore's one loop (``train_epochs`` with a
``loss``) is exactly "SGD on ``∇L + g``": SCAFFOLD's ``g = c − c_i`` and FedDyn's ``g = −∇L_k(θ_k^{t−1})`` (its
quadratic term is the loop's proximal ``mu``). The loop counts the steps it takes (SCAFFOLD's ``K``, FedNova's
``τ_i``) and reports the mean of the data loss alone, without the linear term.
"""
from __future__ import annotations

from collections.abc import Mapping

import attrs
import torch
from torch import nn

from fedcore.training import cross_entropy, train_epochs
from fedcore.types import ClientData


@attrs.frozen(kw_only=True)
class Trained:
    """What one local pass did: the mean data loss and the number of optimizer steps."""

    loss: float
    steps: int


def train_with_linear_term(module: nn.Module, data: ClientData, *, linear: Mapping[str, torch.Tensor] | None,
                           epochs: int, lr: float, batch_size: int, momentum: float = 0.0, mu: float | None = None,
                           generator: torch.Generator | None = None) -> Trained:
    """Train ``module`` in place on cross-entropy plus ``Σ <linear[name], param>`` (named parameters)."""
    terms = [(p, linear[n].to(p.dtype)) for n, p in module.named_parameters()
             if p.requires_grad and linear is not None and n in linear]
    seen: list[tuple[torch.Tensor, int]] = []

    def loss(m: nn.Module, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        value = cross_entropy(m, x, y)
        seen.append((value.detach(), len(y)))
        if not terms:
            return value
        return value + sum((p * g).sum() for p, g in terms)

    train_epochs(module, data, epochs=epochs, lr=lr, momentum=momentum, batch_size=batch_size, mu=mu,
                 generator=generator, loss=loss)
    total = sum(n for _, n in seen)
    mean = sum(float(v) * n for v, n in seen) / max(total, 1)
    return Trained(loss=mean, steps=len(seen))


def full_gradient(module: nn.Module, data: ClientData, *, batch_size: int) -> dict[str, torch.Tensor]:
    """``∇L_i(w)`` over all of ``data`` at the module's current weights (mean cross-entropy, in batches)."""
    from fedcore.data import batches

    params = {n: p for n, p in module.named_parameters() if p.requires_grad}
    grads = {n: torch.zeros_like(p) for n, p in params.items()}
    total = len(data.indices)
    buffers = {n: b.detach().clone() for n, b in module.named_buffers()}  # train mode must not move BN statistics
    module.train()
    for x, y in batches(data.dataset, data.indices, batch_size, shuffle=False):
        module.zero_grad(set_to_none=True)
        (cross_entropy(module, x, y) * (len(y) / total)).backward()
        for n, p in params.items():
            if p.grad is not None:
                grads[n] += p.grad.detach()
    module.zero_grad(set_to_none=True)
    with torch.no_grad():
        for n, b in module.named_buffers():
            b.copy_(buffers[n])
    return grads


def trainable(module: nn.Module) -> dict[str, torch.Tensor]:
    """The current values of ``module``'s trainable parameters, detached copies."""
    return {n: p.detach().clone() for n, p in module.named_parameters() if p.requires_grad}
