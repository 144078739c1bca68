"""FedDyn (Acar et al., ICLR 2021, "Federated Learning Based on Dynamic Regularization", Algorithm 1).

Client k in P_t, from the server model θ^{t−1}, with its own ``∇L_k(θ_k^{t−1})`` (zero before its first round):

* ``θ_k^t = argmin_θ L_k(θ) − <∇L_k(θ_k^{t−1}), θ> + (α/2)‖θ − θ^{t−1}‖²`` (approximately: local SGD on that
  objective; the quadratic is fedcore's proximal term with ``mu = α``);
* ``∇L_k(θ_k^t) = ∇L_k(θ_k^{t−1}) − α(θ_k^t − θ^{t−1})``, kept in ``ClientState.tensors`` (never sent).

Server, m clients in all:

* ``h^t = h^{t−1} − α (1/m) Σ_{k∈P_t} (θ_k^t − θ^{t−1})``;
* ``θ^t = (1/|P_t|) Σ_{k∈P_t} θ_k^t − (1/α) h^t``.

``h`` lives in ``ServerState.aux`` (``feddyn.h.<entry>``, checkpointed, never sent); nothing but the model crosses
the network. fedcore takes ``θ_k^t − θ^{t−1}`` as each client's change from ``update.base`` and the average as a
move of the current model (``fedcore_drift.changes``), the paper's rule on synchronous rounds and defined under
the asynchronous schedules. α is a setting of both halves; the pipeline refuses two different values.
"""
from __future__ import annotations

from collections.abc import Sequence
import math
from typing import Any, ClassVar

import attrs
import torch
from torch import nn

import fedcore
from fedcore import RoundContext
from fedcore.errors import ConfigError
from fedcore.settings import setting
from fedcore.types import AggregateResult, ClientData, ClientInfo, ClientState, ClientUpdate, Share
from fedcore_drift.changes import WEIGHTING, changes, client_weights, move
from fedcore_drift.training import train_with_linear_term, trainable

GRAD = "feddyn.grad"
"""The client's ``∇L_k(θ_k^{t−1})``, one tensor per trainable entry, in ``ClientState.tensors``."""
H = "feddyn.h"
"""The server's ``h``, one tensor per trainable entry, in ``ServerState.aux`` (not sent)."""


@attrs.frozen(eq=False, kw_only=True)
class FedDynUpdate:
    """FedDyn's client: SGD on ``L_k(θ) − <∇L_k(θ_k^{t−1}), θ> + (α/2)‖θ − θ^{t−1}‖²``, then its gradient state."""

    feddyn_client: ClassVar[bool] = True

    alpha: float = setting(0.01, low=0.0, low_open=True, help="α: the dynamic regulariser's weight")
    lr: float = setting(0.05, low=0.0, low_open=True, help="local learning rate")
    epochs: int = setting(1, low=1, help="local epochs")
    batch_size: int = setting(32, low=1, help="minibatch size")
    momentum: float = setting(0.0, low=0.0, high=1.0, high_open=True, help="SGD momentum")

    @fedcore.hookimpl
    def fedcore_local_update(self, client: ClientInfo, share: Share, data: ClientData, state: ClientState,
                             ctx: RoundContext) -> ClientUpdate:
        module = share.module
        start = trainable(module)
        grad = {n: state.tensors.get(f"{GRAD}.{n}", torch.zeros_like(v)) for n, v in start.items()}
        trained = train_with_linear_term(module, data, linear={n: -g for n, g in grad.items()}, epochs=self.epochs,
                                         lr=self.lr, batch_size=self.batch_size, momentum=self.momentum,
                                         mu=self.alpha, generator=ctx.rng("shuffle"))
        end = trainable(module)
        state.tensors.update({f"{GRAD}.{n}": grad[n] - self.alpha * (end[n] - start[n]) for n in start})
        return ClientUpdate.from_share(share, num_examples=len(data), metrics={"loss": trained.loss})


@attrs.frozen(eq=False, kw_only=True)
class FedDynAggregate:
    """FedDyn's server: ``h ← h − α (1/m) Σ Δθ_k``, ``θ ← mean θ_k − h/α``."""

    @classmethod
    def __fedcore_checks__(cls) -> Any:  # how the contract checks build and run it (fedcore.testing.CheckPlan)
        from fedcore.testing import CHECK_FIXTURE, CheckPlan

        return CheckPlan(fixture=attrs.evolve(CHECK_FIXTURE, companions=[FedDynUpdate()]), expected_failures={
            "check_aggregate_identity": "θ = mean θ_k − h/α: identical updates land past them by the dynamic "
                                        "correction −h/α (Acar et al. 2021, Alg. 1)"})

    alpha: float = setting(0.01, low=0.0, low_open=True, help="α: must equal the local update's")
    weighting: str = setting("uniform", choices=WEIGHTING,
                             help="weights of the mean θ_k: uniform 1/|P_t| (the paper) or by sample count")

    @fedcore.hookimpl
    def fedcore_check_pipeline(self, pipeline: Any) -> None:
        local = pipeline.provider("local_update")
        if not getattr(type(local), "feddyn_client", False):
            raise ConfigError(f"feddyn's server step assumes the clients' dynamic regulariser; local_update is "
                              f"{type(local).__name__}: use local_update = \"feddyn-sgd\"")
        if local.alpha != self.alpha:
            raise ConfigError(f"feddyn: aggregate alpha={self.alpha} differs from local_update alpha={local.alpha}; "
                              f"set both to one value")

    @fedcore.hookimpl
    def fedcore_run_start(self, run: Any) -> None:
        run.server.aux.declare(H, kind="feddyn_state")

    @fedcore.hookimpl
    def fedcore_aggregate(self, model: nn.Module, updates: Sequence[ClientUpdate], ctx: RoundContext
                          ) -> AggregateResult:
        deltas = changes(model, updates, "feddyn")
        w = client_weights(updates, self.weighting)
        m = ctx.run.num_clients if ctx.run is not None else len(updates)
        aux = ctx.server.aux
        entries = sorted({k for d in deltas for k in d})
        dtypes = {k: v.dtype for k, v in model.state_dict().items()}  # h is kept in the entry's own precision
        extra: dict[str, torch.Tensor] = {}
        sq = 0.0
        for key in entries:
            total = torch.zeros_like(next(d[key] for d in deltas if key in d))
            for d in sorted(zip((u.client_id for u in updates), deltas), key=lambda t: t[0]):
                if key in d[1]:
                    total += d[1][key]
            old = aux.get(f"{H}.{key}", default=None)
            h = (torch.zeros_like(total) if old is None else old.to(torch.float64)) - self.alpha * total / m
            aux.keep(f"{H}.{key}", h.to(dtypes[key]))
            extra[key] = -h / self.alpha
            sq += float((h**2).sum())
        state = move(model, updates, deltas, w, extra=extra)
        return AggregateResult(state=state, metrics={"feddyn_h_norm": math.sqrt(sq)})

