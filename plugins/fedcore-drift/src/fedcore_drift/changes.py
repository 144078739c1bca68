"""The server side every drift method shares: each client's change from the values it started from, combined.

All three papers write the server step on synchronous rounds, where every client started from the current model
``x``: ``x + Σ_i w_i (y_i − x)`` with a method's weights ``w_i``. fedcore forms each change from ``update.base``
(what that client downloaded) and moves the *current* model by the weighted sum, so the same rule is defined under
the semi-asynchronous and buffered schedules (changes made on older versions land on the newer model) and equals
the papers' on synchronous rounds. Float buffers (BatchNorm statistics) take the convex mean of the uploads, as
``fedavg`` does; integer entries keep the value of the update with the most samples.
"""
from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn

from fedcore.builtin import convex_mean, float_buffer_names
from fedcore.errors import ConfigError
from fedcore.types import ClientUpdate, TensorDict

WEIGHTING = ("uniform", "samples")
"""Client weights: ``1/|S|`` (SCAFFOLD's and FedDyn's papers) or ``n_i / Σ n`` (FedAvg's)."""


def client_weights(updates: Sequence[ClientUpdate], weighting: str) -> list[float]:
    """``1/|S|`` (``uniform``) or ``n_i / Σ_S n`` (``samples``)."""
    total = float(sum(u.num_examples for u in updates))
    if weighting == "samples" and total > 0:
        return [u.num_examples / total for u in updates]
    return [1.0 / len(updates)] * len(updates)


def changes(model: nn.Module, updates: Sequence[ClientUpdate], component: str) -> list[dict[str, torch.Tensor]]:
    """Each update's ``y_i − base_i`` (float64) for the model's trainable float entries (parameters, not buffers)."""
    own = model.state_dict()
    buffers = float_buffer_names(model)
    out = []
    for u in updates:
        delta = {}
        for key, value in u.tensors.items():
            if key not in own or tuple(value.shape) != tuple(own[key].shape):
                raise ConfigError(f"{component} combines whole-model changes; client {u.client_id} uploads {key!r}, "
                                  f"which is not an entry of the global model with its shape: use split = "
                                  f"\"whole-model\"")
            if not value.is_floating_point() or key in buffers:
                continue
            if key not in u.base:
                raise ConfigError(f"{component} needs the value client {u.client_id} started from for {key!r} "
                                  f"(update.base) to form its change")
            delta[key] = value.to(torch.float64) - u.base[key].to(torch.float64)
        out.append(delta)
    return out


def move(model: nn.Module, updates: Sequence[ClientUpdate], deltas: Sequence[dict[str, torch.Tensor]],
         coefficients: Sequence[float], *, extra: dict[str, torch.Tensor] | None = None) -> TensorDict:
    """The new state: ``x + Σ_i coefficients[i] · deltas[i] (+ extra)`` per parameter entry, buffers averaged."""
    current = model.state_dict()
    out: TensorDict = {}
    for key in sorted({k for d in deltas for k in d}):
        step = torch.zeros_like(current[key], dtype=torch.float64)
        for d, c in zip(deltas, coefficients, strict=True):
            if key in d:
                step += c * d[key]
        if extra is not None and key in extra:
            step += extra[key].to(torch.float64)
        out[key] = (current[key].to(torch.float64) + step).to(current[key].dtype)
    weights = [float(u.num_examples) for u in updates]
    out.update(convex_mean(updates, weights, float_buffer_names(model)))
    heaviest = max(updates, key=lambda u: u.num_examples)
    for key, value in heaviest.tensors.items():
        if not value.is_floating_point():
            out[key] = value.clone()
    return out


def float_entries(deltas: Sequence[dict[str, torch.Tensor]]) -> list[str]:
    """Every entry some change names, sorted (the order the server state is kept in)."""
    return sorted({k for d in deltas for k in d})
