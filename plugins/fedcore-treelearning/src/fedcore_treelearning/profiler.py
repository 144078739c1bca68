"""Per-unit cost of a model for the split-point solver: FLOPs, activation bytes, parameters.

One real forward and backward of a sample batch runs unit by unit. Each unit's input is a detached
leaf (requiring grad after the first unit, as a server or a deeper client part needs the gradient of
its input), so ``torch.utils.flop_counter.FlopCounterMode`` attributes every FLOP to exactly one unit
and the backward of a unit includes the input gradient it sends down the tree. The loss is the sum of
the last unit's output (gradient of ones): its own cost is not a unit's. CPU fused attention is not in
torch's FLOP registry; its formula is added here so ViT blocks are counted in full.
"""
from __future__ import annotations

from collections.abc import Sequence
import copy
from typing import Any

import attrs
import torch
from torch import nn

from fedcore.errors import ConfigError
from fedcore_treelearning.units import partition_units

aten = torch.ops.aten


def _cpu_attention_formulas() -> dict[Any, Any]:
    from torch.utils import flop_counter

    def forward(query_shape, key_shape, value_shape, *args, out_shape=None, **kwargs) -> int:
        return flop_counter.sdpa_flop_count(query_shape, key_shape, value_shape)

    def backward(grad_out_shape, query_shape, key_shape, value_shape, *args, out_shape=None, **kwargs) -> int:
        return flop_counter.sdpa_backward_flop_count(grad_out_shape, query_shape, key_shape, value_shape)

    if not hasattr(aten, "_scaled_dot_product_flash_attention_for_cpu"):
        return {}
    return {aten._scaled_dot_product_flash_attention_for_cpu: forward,
            aten._scaled_dot_product_flash_attention_for_cpu_backward: backward}


@attrs.frozen(kw_only=True)
class UnitProfile:
    """One partition unit. FLOPs and activation bytes are per sample; parameters are per unit."""

    index: int  # 1-based, the thesis's layer index k
    name: str
    forward_flops: float
    backward_flops: float
    output_bytes: float  # F^k: the activation sent up (and its gradient sent down) if the split follows this unit
    saved_bytes: float  # what autograd keeps for backward (parameters excluded)
    params: int
    param_bytes: int  # parameters and buffers
    trainable_bytes: int

    @property
    def train_flops(self) -> float:
        """Q^k per sample: forward + backward."""
        return self.forward_flops + self.backward_flops


@attrs.frozen(kw_only=True)
class ModelProfile:
    """The ordered unit profiles of one model, measured on a batch of ``batch_size`` samples."""

    model_type: str
    batch_size: int
    input_bytes: float  # per sample
    units: tuple[UnitProfile, ...]

    @property
    def n_units(self) -> int:
        return len(self.units)

    def client_memory_bytes(self, split: int, *, batch_size: int, optimizer_slots: int = 1) -> int:
        """Memory of the client part below ``split`` (units 1..split-1): weights, gradients, optimizer, activations."""
        if not 2 <= split <= self.n_units:
            raise ConfigError(f"split={split} is outside the model: a {self.model_type} with {self.n_units} units "
                              f"takes splits 2..{self.n_units} (units 1..split-1 on the client)")
        part = self.units[:split - 1]
        weights = sum(u.param_bytes + u.trainable_bytes * (1 + optimizer_slots) for u in part)
        return int(weights + sum(u.saved_bytes for u in part) * batch_size)


def _saved_bytes_hook(param_ptrs: set[int], saved: dict[int, int]):
    def pack(t: torch.Tensor) -> torch.Tensor:
        ptr = t.untyped_storage().data_ptr()
        if ptr not in param_ptrs:
            saved[ptr] = max(saved.get(ptr, 0), t.untyped_storage().nbytes())
        return t
    return pack


def profile_model(model: nn.Module | Sequence[nn.Module], sample: torch.Tensor) -> ModelProfile:
    """Profile every partition unit of ``model`` on ``sample`` (a batch). The model itself is not touched."""
    from torch.utils.flop_counter import FlopCounterMode

    if not isinstance(sample, torch.Tensor) or sample.dim() < 1 or sample.shape[0] < 1:
        raise ConfigError(f"sample must be a batch tensor with at least one sample, got {type(sample).__name__} "
                          f"{tuple(getattr(sample, 'shape', ()))}")
    model_type = type(model).__qualname__
    work = copy.deepcopy(model)
    units = partition_units(work)
    for _, unit in units:
        unit.train()
    batch = int(sample.shape[0])
    formulas = _cpu_attention_formulas()
    inputs, outputs, forward_flops, saved_bytes = [], [], [], []
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        h = sample
        for k, (name, unit) in enumerate(units):
            x = h.detach().requires_grad_(k > 0 and h.is_floating_point())
            param_ptrs = {p.untyped_storage().data_ptr() for p in unit.parameters()}
            saved: dict[int, int] = {}
            with FlopCounterMode(display=False, custom_mapping=formulas) as counter, \
                    torch.autograd.graph.saved_tensors_hooks(_saved_bytes_hook(param_ptrs, saved), lambda t: t):
                h = unit(x)
            if not isinstance(h, torch.Tensor):
                raise ConfigError(f"unit {k + 1} ({name!r}) of a {model_type} returned {type(h).__name__}; "
                                  f"every partition unit must return one tensor")
            inputs.append(x)
            outputs.append(h)
            forward_flops.append(counter.get_total_flops())
            saved_bytes.append(sum(saved.values()))
        grad = torch.ones_like(outputs[-1])
        backward_flops = [0] * len(units)
        for k in reversed(range(len(units))):
            with FlopCounterMode(display=False, custom_mapping=formulas) as counter:
                if outputs[k].requires_grad:
                    torch.autograd.backward(outputs[k], grad)
            backward_flops[k] = counter.get_total_flops()
            input_grad = inputs[k].grad
            grad = input_grad if input_grad is not None else torch.zeros_like(inputs[k])
    profiles = []
    for k, (name, unit) in enumerate(units):
        params = list(unit.parameters())
        profiles.append(UnitProfile(
            index=k + 1, name=name, forward_flops=forward_flops[k] / batch, backward_flops=backward_flops[k] / batch,
            output_bytes=outputs[k].numel() * outputs[k].element_size() / batch, saved_bytes=saved_bytes[k] / batch,
            params=sum(p.numel() for p in params),
            param_bytes=sum(t.numel() * t.element_size() for t in params + list(unit.buffers())),
            trainable_bytes=sum(p.numel() * p.element_size() for p in params if p.requires_grad)))
    return ModelProfile(model_type=model_type, batch_size=batch, input_bytes=sample[0].numel() * sample.element_size(),
                        units=tuple(profiles))
