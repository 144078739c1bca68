"""What a submodel costs a client: parameters, FLOPs of a training step and training memory.

FLOPs come from ``torch.utils.flop_counter`` on the real sliced submodel (forward and backward run
once on a zero batch), so a frozen prefix that runs under ``no_grad`` costs forward FLOPs only.
Memory is weights + gradients of the trainable parameters + optimizer states + the activations that
autograd actually saves for backward (measured with ``saved_tensors_hooks``, parameters excluded).
"""
from __future__ import annotations

import attrs
import torch

from fedcore.errors import ConfigError
from fedcore_pruning.vit import PrunableViT

# Per-parameter state tensors, as the optimizers keep them. timm.optim.Adan keeps four, not three:
# exp_avg, exp_avg_sq, exp_avg_diff (the three moments) and neg_pre_grad (the previous gradient).
OPTIMIZER_STATES = {"sgd": 0, "sgd_momentum": 1, "adamw": 2, "adan": 4}


@attrs.frozen(kw_only=True)
class ParameterCount:
    frozen: int
    trainable: int

    @property
    def total(self) -> int:
        return self.frozen + self.trainable


@attrs.frozen(kw_only=True)
class FlopCount:
    """FLOPs of one training step on ``batch`` samples (a multiply-add counts as 2)."""

    batch: int
    forward: int
    backward: int

    @property
    def per_sample(self) -> float:
        return (self.forward + self.backward) / self.batch


@attrs.frozen(kw_only=True)
class MemoryEstimate:
    """Bytes a training step holds at its peak (allocator overhead and workspace not included)."""

    weights: int
    gradients: int
    optimizer: int
    activations: int

    @property
    def total(self) -> int:
        return self.weights + self.gradients + self.optimizer + self.activations


def count_parameters(model: PrunableViT) -> ParameterCount:
    """Frozen (prefix, and embeddings when the window does not start at 0) and trainable parameter counts."""
    frozen = sum(p.numel() for p in model.parameters() if not p.requires_grad)
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    return ParameterCount(frozen=frozen, trainable=trainable)


def _input(model: PrunableViT, batch: int) -> torch.Tensor:
    if batch < 1:
        raise ConfigError(f"batch={batch} must be >= 1")
    s = model.shape
    p = next(model.parameters())
    return torch.zeros(batch, s.in_chans, s.img_size, s.img_size, dtype=p.dtype, device=p.device)


def _loss(outputs: list[torch.Tensor]) -> torch.Tensor:
    return torch.stack([o.float().sum() for o in outputs]).sum()


def count_flops(model: PrunableViT, batch: int = 1) -> FlopCount:
    """Forward and backward FLOPs of one step of ``model`` (every exit and the head contribute to the loss)."""
    from torch.utils.flop_counter import FlopCounterMode  # here: importing it brings in triton (docs/plugins.md)

    x = _input(model, batch)
    with FlopCounterMode(display=False) as fwd:
        loss = _loss(model.forward_all(x))
    with FlopCounterMode(display=False) as bwd:
        if loss.requires_grad:
            loss.backward()
    model.zero_grad(set_to_none=True)
    return FlopCount(batch=batch, forward=fwd.get_total_flops(), backward=bwd.get_total_flops())


def activation_bytes(model: PrunableViT, batch: int) -> int:
    """Bytes of the tensors autograd saves for backward in one forward pass (distinct storages, no parameters)."""
    params = {p.untyped_storage().data_ptr() for p in model.parameters()}
    seen: dict[int, int] = {}

    def pack(t: torch.Tensor) -> torch.Tensor:
        storage = t.untyped_storage()
        if storage.data_ptr() not in params:
            seen[storage.data_ptr()] = storage.nbytes()
        return t

    x = _input(model, batch)
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        outputs = model.forward_all(x)
    del outputs
    return sum(seen.values())


def training_memory(model: PrunableViT, batch: int, optimizer: str = "adan") -> MemoryEstimate:
    """Training memory of ``model`` at batch size ``batch`` with ``optimizer`` (one of OPTIMIZER_STATES)."""
    if optimizer not in OPTIMIZER_STATES:
        raise ConfigError(f"optimizer={optimizer!r} is not allowed; choose one of: {', '.join(OPTIMIZER_STATES)}")
    weights = sum(p.numel() * p.element_size() for p in model.parameters())
    grads = sum(p.numel() * p.element_size() for p in model.parameters() if p.requires_grad)
    return MemoryEstimate(weights=weights, gradients=grads, optimizer=OPTIMIZER_STATES[optimizer] * grads,
                          activations=activation_bytes(model, batch))
