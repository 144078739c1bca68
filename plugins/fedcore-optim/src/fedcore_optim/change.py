"""The averaged client change Δ that a server optimiser steps on, under every scheduler.

Reddi et al. (2021), Alg. 2, line 9: ``Δ_t = (1/|S|) Σ_{i∈S} Δ_i^t`` with ``Δ_i^t = x_i^t − x_t``, the clients'
change from the model the server sent them. fedcore forms each client's change from the values it started
from (``update.base``), so the same Δ is defined under every schedule:

* synchronous rounds: every base is the current model, and Δ is exactly Reddi's (Flower's
  ``fedavg(x_i) − x_t`` with ``weighting = "samples"``);
* FedBuff (``buffered``) and semi-asynchronous rounds: Δ is FedBuff's buffered step direction,
  ``Σ_i w_i s(τ_i) (x_i − base_i)`` over the arrivals, each change discounted by its staleness ``s(τ)``
  (``1/sqrt(1+τ)`` by default, Nguyen et al. 2022);
* FedAsync (``async``): one arrival per aggregation, so Δ is that client's change times ``s(τ)``.

The optimiser then moves the *current* global model by its rule applied to Δ. Float buffers (BatchNorm
statistics) are not stepped: they take the convex mean of the uploaded values (docs/plugins.md §9), and
integer entries keep the value of the heaviest update.
"""
from __future__ import annotations

from collections.abc import Sequence

import attrs
import torch
from torch import nn

from fedcore.builtin import convex_mean, float_buffer_names, staleness_weight
from fedcore.errors import ConfigError
from fedcore.types import ClientUpdate, TensorDict

STALENESS = ("constant", "polynomial", "hinge")
"""The staleness discounts s(τ) of FedAsync (Xie et al., 2019, §5.2); FedBuff uses ``polynomial`` with a = 0.5."""
WEIGHTING = ("samples", "uniform")


@attrs.frozen(kw_only=True)
class AveragedChange:
    """Δ per uploaded parameter entry (float64), the final values of everything not stepped, the mean s(τ)."""

    delta: dict[str, torch.Tensor]
    keep: TensorDict
    mean_staleness_weight: float


def check_comparable(model: nn.Module, updates: Sequence[ClientUpdate], component: str) -> None:
    """Every upload is an entry of the global model with its shape, and carries the value it started from.

    Uploads that are not (distillation features, sliced submodels of a width-pruning split) have no change
    a server optimiser or a robust rule could compare or apply: refused in one line naming the client.
    """
    own = model.state_dict()
    for u in updates:
        for key, value in u.tensors.items():
            if key not in own:
                raise ConfigError(f"{component} steps on changes of the global model's entries; client {u.client_id} "
                                  f"uploads {key!r}, which the global model has not (features or logits?): use "
                                  f"the aggregator of the split that sends them")
            if tuple(value.shape) != tuple(own[key].shape):
                raise ConfigError(f"{component} steps on whole-model changes; client {u.client_id} uploads {key!r} "
                                  f"with shape {tuple(value.shape)}, the global model's is {tuple(own[key].shape)} "
                                  f"(a sliced submodel?): use the split's own aggregator, e.g. masked-delta")
            if value.is_floating_point() and key not in u.base:
                raise ConfigError(f"{component} needs the value client {u.client_id} started from for {key!r} "
                                  f"(update.base) to form its change")


def client_weights(updates: Sequence[ClientUpdate], weighting: str) -> list[float]:
    """``n_i / Σ n`` (``samples``, FedAvg's and Flower's weights) or ``1/|S|`` (``uniform``, Reddi's Alg. 2)."""
    if weighting == "samples":
        total = float(sum(u.num_examples for u in updates))
        if total > 0:
            return [u.num_examples / total for u in updates]
    return [1.0 / len(updates)] * len(updates)


def averaged_change(model: nn.Module, updates: Sequence[ClientUpdate], *, weighting: str, staleness: str,
                    a: float, b: float, component: str) -> AveragedChange:
    """Δ = Σ_i w_i s(τ_i) (x_i − base_i) per parameter entry, over the updates that carry it (weights renormalised
    among them); buffers and integer entries as the module docstring says."""
    check_comparable(model, updates, component)
    w = client_weights(updates, weighting)
    s = [staleness_weight(staleness, u.staleness, a=a, b=b) for u in updates]
    buffers = float_buffer_names(model)
    keep: TensorDict = convex_mean(updates, [wi * si for wi, si in zip(w, s)], buffers)
    delta: dict[str, torch.Tensor] = {}
    for key in sorted({k for u in updates for k in u.tensors} - buffers):
        holders = [(u, wi, si) for u, wi, si in zip(updates, w, s) if key in u.tensors]
        first = holders[0][0].tensors[key]
        if not first.is_floating_point():
            keep[key] = max(holders, key=lambda h: h[1])[0].tensors[key].clone()
            continue
        total = sum(wi for _, wi, _ in holders)
        acc = torch.zeros(first.shape, dtype=torch.float64, device=first.device)
        for u, wi, si in holders:
            acc.add_(u.tensors[key].to(torch.float64) - u.base[key].to(torch.float64), alpha=wi * si / total)
        delta[key] = acc
    return AveragedChange(delta=delta, keep=keep, mean_staleness_weight=sum(s) / len(s))
