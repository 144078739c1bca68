"""Element-wise weighted merge of masked client deltas (Co-S2P Eq. 5, FedRolex, HeteroFL).

For every element e of every global tensor::

    w'(e) = w(e) - server_lr * sum_u m_u(e) a_u(e) Δ_u(e) / sum_u m_u(e) a_u(e)

with Δ_u = w_start - w_end in global coordinates and m_u its element mask (``masked_delta`` builds both
from a client's submodel before and after training). Tensors an update has no mask for, and elements
its mask leaves False, count as not trained by that client; elements no client trained keep their value. The weight
rule a_u is a setting:

* ``"uniform"``: a_u = 1, the per-element count average of FedRolex and HeteroFL;
* ``"samples"``: a_u = ``weights[u]`` (e.g. local sample counts, FedAvg-style);
* a callable ``rule(name, global_tensor, deltas, masks, weights) -> list of tensors``, one element weight
  per update broadcastable to the tensor (Co-S2P's Eq. 4 γ per segment plugs in here).

Where the weights of an element sum to 0 the uniform mean is used instead (spec 004 §1.6).
"""
from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

import torch

from fedcore.errors import ConfigError
from fedcore.types import TensorDict
from fedcore_pruning.errors import SubmodelMismatchError
from fedcore_pruning.slicing import scatter, trainable_names
from fedcore_pruning.spec import SubmodelSpec

WeightRule = Callable[[str, torch.Tensor, list[torch.Tensor], list[torch.Tensor], list[float]], Sequence[torch.Tensor]]
RULES = ("uniform", "samples")


def _validate(global_state: Mapping[str, torch.Tensor],
              updates: Sequence[tuple[Mapping[str, torch.Tensor], Mapping[str, torch.Tensor]]],
              weights: Sequence[float], rule: str | WeightRule) -> None:
    if not callable(rule) and rule not in RULES:
        raise ConfigError(f"rule={rule!r} is not allowed; choose one of: {', '.join(map(repr, RULES))} or a callable")
    if len(weights) != len(updates):
        raise ConfigError(f"weights has {len(weights)} entries for {len(updates)} updates")
    bad = [w for w in weights if not (float(w) >= 0.0 and float(w) < float("inf"))]
    if bad:
        raise ConfigError(f"weights must be finite and >= 0, got {bad}")
    for u, (delta, mask) in enumerate(updates):
        if not set(mask) <= set(delta):
            lacking = sorted(set(mask) - set(delta))[:5]
            raise SubmodelMismatchError(f"update {u}: mask names tensors the delta lacks: {lacking}")
        for name in mask:
            d = delta[name]
            if name not in global_state:
                raise SubmodelMismatchError(f"update {u}: tensor {name} is not in the global state")
            if d.shape != global_state[name].shape or mask[name].shape != global_state[name].shape:
                raise SubmodelMismatchError(
                    f"update {u}: tensor {name} has delta {tuple(d.shape)} / mask {tuple(mask[name].shape)}; the "
                    f"global tensor is {tuple(global_state[name].shape)} (scatter the submodel delta first)")
            if mask[name].dtype != torch.bool:
                raise SubmodelMismatchError(f"update {u}: mask of {name} has dtype {mask[name].dtype}; expected bool")
            if not torch.isfinite(d[mask[name]]).all():
                raise SubmodelMismatchError(f"update {u}: tensor {name} has NaN or Inf in its trained elements")


def masked_delta(start: Mapping[str, torch.Tensor], end: Mapping[str, torch.Tensor], spec: SubmodelSpec,
                 global_state: Mapping[str, torch.Tensor]) -> tuple[TensorDict, dict[str, torch.Tensor]]:
    """A client's update in global coordinates: ``(Δ, mask)`` with Δ = start - end on the tensors it trains.

    ``start`` and ``end`` are the submodel's state dicts before and after local training. Only
    ``trainable_names(spec)`` enter, so the frozen prefix (Δ = 0 by construction) does not dilute the merge.
    """
    names = trainable_names(spec)
    delta = {name: start[name] - end[name] for name in end if name in names}
    zeros = {name: torch.zeros_like(global_state[name]) for name in names if name in global_state}
    full, mask = scatter(delta, spec, into=zeros)
    return {name: full[name] for name in mask}, mask


def masked_weighted_delta(global_state: Mapping[str, torch.Tensor],
                          updates_with_masks: Sequence[tuple[Mapping[str, torch.Tensor], Mapping[str, torch.Tensor]]],
                          weights: Sequence[float] | None = None, *, rule: str | WeightRule = "uniform",
                          server_lr: float = 1.0) -> TensorDict:
    """A new global state: each element moved by the weighted mean delta of the clients that trained it.

    Everything is validated before anything is merged; the inputs are not modified.
    """
    if not (isinstance(server_lr, (int, float)) and server_lr > 0):
        raise ConfigError(f"server_lr={server_lr!r} must be a number > 0")
    weights = [1.0] * len(updates_with_masks) if weights is None else [float(w) for w in weights]
    _validate(global_state, updates_with_masks, weights, rule)
    out: TensorDict = {}
    for name, w in global_state.items():
        holders = [u for u, (_, mask) in enumerate(updates_with_masks) if name in mask]
        if not holders or not w.is_floating_point():
            out[name] = w.clone()
            continue
        deltas = [updates_with_masks[u][0][name].to(w.dtype) for u in holders]
        masks = [updates_with_masks[u][1][name] for u in holders]
        if callable(rule):
            factors = [torch.as_tensor(a, dtype=w.dtype).expand_as(w)
                       for a in rule(name, w, deltas, masks, [weights[u] for u in holders])]
            if len(factors) != len(holders):
                raise ConfigError(f"weight rule returned {len(factors)} weights for {len(holders)} updates of {name}")
        elif rule == "samples":
            factors = [torch.full_like(w, weights[u]) for u in holders]
        else:
            factors = [torch.ones_like(w) for _ in holders]
        num, den, plain, count = (torch.zeros_like(w) for _ in range(4))
        for d, m, a in zip(deltas, masks, factors):
            m = m.to(w.dtype)
            num += m * a * torch.where(m.bool(), d, torch.zeros_like(d))
            den += m * a
            plain += torch.where(m.bool(), d, torch.zeros_like(d))
            count += m
        trained = count > 0
        weighted = den > 0
        step = torch.where(weighted, num / torch.where(weighted, den, torch.ones_like(den)),
                           plain / count.clamp(min=1))
        out[name] = torch.where(trained, w - server_lr * step, w)
    return out
