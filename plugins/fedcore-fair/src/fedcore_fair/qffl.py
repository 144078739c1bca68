"""q-FFL's aggregator, q-FedAvg (Li, Sanjabi, Beirami, Smith, "Fair Resource Allocation in Federated Learning",
ICLR 2020, Algorithm 2).

q-FFL minimises ``Σ_k p_k F_k^{q+1}(w) / (q+1)``: a larger q gives clients with a larger loss more weight, so the
accuracy is spread more evenly across clients; q = 0 is FedAvg's objective. Each round, from each client's trained
model ``w̄_k`` and its loss ``F_k(w^t)`` at the model it started from::

    ΔW_k = L (w^t − w̄_k)                                   (L = 1/η, η the clients' learning rate)
    Δ_k  = F_k^q(w^t) ΔW_k
    h_k  = q F_k^{q−1}(w^t) ||ΔW_k||² + L F_k^q(w^t)
    w^{t+1} = w^t − Σ_k Δ_k / Σ_k h_k

``F_k(w^t)`` is measured on the client before it trains (``qffl-loss`` adds it to the update's metrics; the
server never sees client data). ``w^t`` is each client's own starting point (``update.base``), so under
asynchronous schedules a stale client's step is formed where it started and applied to the current model.
Float buffers take the sample-weighted mean of the uploaded values; counters the heaviest update's.
"""
from __future__ import annotations

from collections.abc import Generator, Sequence
import math
from typing import Any, ClassVar

import attrs
import torch
from torch import nn

import fedcore
from fedcore import RoundContext
from fedcore.builtin import convex_mean, float_buffer_names
from fedcore.data import batches
from fedcore.errors import ConfigError
from fedcore.settings import setting
from fedcore.training import cross_entropy
from fedcore.types import AggregateResult, ClientData, ClientUpdate, Share, TensorDict

LOSS = "qffl_loss"
"""The ``ClientUpdate.metrics`` key of the client's loss ``F_k(w^t)`` before training."""
EPSILON = 1e-10
"""Added to every loss before powers (as Flower's QFedAvg does), so that q = 0 with a zero loss stays finite."""


def loss_before_training(module: nn.Module, data: ClientData, batch_size: int = 512) -> float:
    """Mean cross-entropy of ``module`` on the client's data, in eval mode (BatchNorm statistics untouched)."""
    was_training = module.training
    module.eval()
    total, seen = 0.0, 0
    try:
        with torch.no_grad():
            for x, y in batches(data.dataset, data.indices, batch_size, shuffle=False):
                total += float(cross_entropy(module, x, y)) * len(y)
                seen += len(y)
    finally:
        module.train(was_training)
    return total / max(seen, 1)


@attrs.frozen(eq=False, kw_only=True)
class QFFLLoss:
    """Reports the client's loss at the model it received, before its local update (``metrics["qffl_loss"]``)."""

    reports_qffl_loss: ClassVar[bool] = True

    @fedcore.hookimpl(wrapper=True)
    def fedcore_local_update(self, client: Any, share: Share, data: ClientData, state: Any, ctx: Any
                             ) -> Generator[None, ClientUpdate, ClientUpdate]:
        loss = loss_before_training(share.module, data)
        update = yield
        return attrs.evolve(update, metrics={**update.metrics, LOSS: loss})


@attrs.frozen(eq=False, kw_only=True)
class QFedAvg:
    """q-FedAvg (Li et al., 2020, Alg. 2): clients with a larger loss get a larger say, by ``q``."""

    needs_individual_updates: ClassVar[bool] = True
    """It weighs each client's change by its own loss: one combined update would not do."""

    q: float = setting(1.0, low=0.0, help="fairness: 0 is FedAvg's objective, larger spreads accuracy more evenly")
    local_lr: float = setting(0.05, low=0.0, low_open=True,
                              help="η, the clients' learning rate: L = 1/η is the paper's Lipschitz estimate")

    @classmethod
    def __fedcore_checks__(cls) -> Any:  # how the contract checks build and run it (fedcore.testing.CheckPlan)
        import attrs as _attrs

        from fedcore.testing import CHECK_FIXTURE, CheckPlan

        return CheckPlan(
            fixture=_attrs.evolve(CHECK_FIXTURE, companions=[QFFLLoss()]),
            expected_failures={name: "the contract's synthetic updates carry no qffl_loss (qffl-loss measures it on "
                                     "the client, before training)"
                               for name in ("check_aggregate_identity", "check_aggregate_does_not_mutate",
                                            "check_aggregate_single_client", "check_aggregate_order_invariant",
                                            "check_aggregate_stays_on_the_models_device")})

    @fedcore.hookimpl
    def fedcore_check_pipeline(self, pipeline: Any) -> None:
        if not any(getattr(type(c), "reports_qffl_loss", False) for c in pipeline.components):
            raise ConfigError("qffl weighs each client by its loss before training, which the client reports: add "
                              "plugins = [\"qffl-loss\"]")

    @fedcore.hookimpl
    def fedcore_aggregate(self, model: nn.Module, updates: Sequence[ClientUpdate], ctx: RoundContext
                          ) -> AggregateResult:
        own = model.state_dict()
        buffers = float_buffer_names(model)
        lipschitz = 1.0 / self.local_lr
        for u in updates:
            if LOSS not in u.metrics:
                raise ConfigError(f"qffl needs client {u.client_id}'s loss before training (metrics[{LOSS!r}]): add "
                                  f"plugins = [\"qffl-loss\"]")
            for key, value in u.tensors.items():
                if key not in own or tuple(value.shape) != tuple(own[key].shape):
                    raise ConfigError(f"qffl steps on whole-model changes; client {u.client_id}'s {key!r} is not an "
                                      f"entry of the global model with its shape")
                if value.is_floating_point() and key not in u.base:
                    raise ConfigError(f"qffl needs the value client {u.client_id} started from for {key!r} "
                                      f"(update.base)")
        keys = sorted({k for u in updates for k, v in u.tensors.items() if v.is_floating_point()} - buffers)
        losses = [float(u.metrics[LOSS]) + EPSILON for u in updates]
        numerator = {k: torch.zeros(own[k].shape, dtype=torch.float64, device=own[k].device) for k in keys}
        h_total = 0.0
        for u, loss in zip(updates, losses):
            dw = {k: lipschitz * (u.base[k].to(torch.float64) - u.tensors[k].to(torch.float64))
                  for k in keys if k in u.tensors}
            sq_norm = sum(float((d**2).sum()) for d in dw.values())
            for k, d in dw.items():
                numerator[k].add_(d, alpha=loss**self.q)
            h_total += self.q * loss ** (self.q - 1.0) * sq_norm + lipschitz * loss**self.q
        state: TensorDict = {k: (own[k].to(torch.float64) - numerator[k] / h_total).to(own[k].dtype) for k in keys}
        state.update(convex_mean(updates, [float(u.num_examples) for u in updates], buffers))
        for key in sorted({k for u in updates for k, v in u.tensors.items() if not v.is_floating_point()}):
            holders = [u for u in updates if key in u.tensors]
            state[key] = max(holders, key=lambda u: u.num_examples).tensors[key].clone()
        mean = sum(losses) / len(losses)
        return AggregateResult(state=state, metrics={
            "loss_mean": mean, "loss_max": max(losses),
            "loss_std": math.sqrt(sum((x - mean) ** 2 for x in losses) / len(losses))})
