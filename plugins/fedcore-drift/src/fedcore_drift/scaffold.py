"""SCAFFOLD (Karimireddy et al., ICML 2020, Algorithm 1): local steps corrected by control variates.

Client i, given the server model x and the server control variate c (line 7), with its own c_i:

* line 10, K times: ``y_i ← y_i − η_l (g_i(y_i) − c_i + c)``;
* line 12: ``c_i⁺ ← g_i(x)`` (option I, the gradient of the local loss at x, here over all local data) or
  ``c_i⁺ ← c_i − c + (x − y_i) / (K η_l)`` (option II);
* line 13: send ``Δy_i = y_i − x`` (the upload, a change from ``update.base``) and ``Δc_i = c_i⁺ − c_i`` (aux);
  line 14: ``c_i ← c_i⁺`` (kept in ``ClientState.tensors``, never sent).

Server, over the sampled S of N clients (lines 16-17): ``x ← x + η_g (1/|S|) Σ Δy_i`` and
``c ← c + (1/N) Σ Δc_i`` (that is ``c + |S|/N · mean Δc``). ``c`` lives in ``ServerState.aux`` under
``scaffold.c.<entry>`` and goes down with every share (ledger kind ``control_variate``); each ``Δc_i`` comes up
under ``scaffold.dc.<entry>`` (kind ``control_variate_delta``). Both are checkpointed, so a resumed run is the
uninterrupted one. Under the asynchronous schedules each arrival's ``Δc_i`` is added when it is aggregated, and its
``Δy_i`` moves the current model (``fedcore_drift.changes``).
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
from fedcore_drift.training import full_gradient, train_with_linear_term, trainable

C = "scaffold.c"
"""The server control variate c, one tensor per trainable entry: ``scaffold.c.<entry>`` (sent down)."""
DC = "scaffold.dc"
"""A client's control-variate change Δc_i: ``scaffold.dc.<entry>`` (sent up)."""
OPTIONS = ("I", "II")


@attrs.frozen(eq=False, kw_only=True)
class ScaffoldUpdate:
    """SCAFFOLD's client (Alg. 1, lines 7-14): SGD on ``g_i(y) − c_i + c``, then the new ``c_i`` by option I or II."""

    scaffold_client: ClassVar[bool] = True

    option: str = setting("II", choices=OPTIONS,
                          help="c_i⁺: I = the local gradient at x (one more pass), II = from the steps taken")
    lr: float = setting(0.05, low=0.0, low_open=True, help="η_l: the local learning rate")
    epochs: int = setting(1, low=1, help="local epochs (K = the steps they take)")
    batch_size: int = setting(32, low=1, help="minibatch size")
    momentum: float = setting(0.0, low=0.0, high=1.0, high_open=True,
                              help="SGD momentum (0 in the paper; option II's (x − y)/(Kη) assumes plain SGD)")

    @fedcore.hookimpl
    def fedcore_local_update(self, client: ClientInfo, share: Share, data: ClientData, state: ClientState,
                             ctx: RoundContext) -> ClientUpdate:
        module = share.module
        x = trainable(module)
        c = {n: share.aux.get(f"{C}.{n}", torch.zeros_like(v)) for n, v in x.items()}
        c_i = {n: state.tensors.get(f"{C}.{n}", torch.zeros_like(v)) for n, v in x.items()}
        g_at_x = full_gradient(module, data, batch_size=self.batch_size) if self.option == "I" else None
        correction = {n: c[n] - c_i[n] for n in x}
        trained = train_with_linear_term(module, data, linear=correction, epochs=self.epochs, lr=self.lr,
                                         batch_size=self.batch_size, momentum=self.momentum,
                                         generator=ctx.rng("shuffle"))
        y = trainable(module)
        if g_at_x is not None:
            c_new = g_at_x
        else:
            scale = 1.0 / (max(trained.steps, 1) * self.lr)
            c_new = {n: c_i[n] - c[n] + (x[n] - y[n]) * scale for n in x}
        state.tensors.update({f"{C}.{n}": v.detach().clone() for n, v in c_new.items()})
        update = ClientUpdate.from_share(share, num_examples=len(data),
                                         metrics={"loss": trained.loss, "local_steps": float(trained.steps)})
        return attrs.evolve(update, aux={f"{DC}.{n}": c_new[n] - c_i[n] for n in x})


@attrs.frozen(eq=False, kw_only=True)
class ScaffoldAggregate:
    """SCAFFOLD's server (Alg. 1, lines 16-17): ``x ← x + η_g mean Δy_i``, ``c ← c + (1/N) Σ Δc_i``."""

    server_lr: float = setting(1.0, low=0.0, low_open=True, help="η_g: the global step size")
    weighting: str = setting("uniform", choices=WEIGHTING,
                             help="weights of the Δy_i: uniform 1/|S| (the paper) or by sample count")

    @classmethod
    def __fedcore_checks__(cls) -> Any:  # how the contract checks build and run it (fedcore.testing.CheckPlan)
        from fedcore.testing import CHECK_FIXTURE, CheckPlan

        def expected(component: Any) -> dict[str, str]:
            if component.server_lr == 1.0:
                return {}
            return {"check_aggregate_identity": "η_g ≠ 1 moves by η_g·Δy: identical updates do not land the model "
                                                "on them (Alg. 1, line 17)"}

        return CheckPlan(fixture=attrs.evolve(CHECK_FIXTURE, companions=[ScaffoldUpdate()]), expected_failures=expected)

    @fedcore.hookimpl
    def fedcore_check_pipeline(self, pipeline: Any) -> None:
        local = pipeline.provider("local_update")
        if not getattr(type(local), "scaffold_client", False):
            raise ConfigError(f"scaffold aggregates control variates its clients compute; local_update is "
                              f"{type(local).__name__}: use local_update = \"scaffold-sgd\"")

    @fedcore.hookimpl
    def fedcore_run_start(self, run: Any) -> None:
        run.server.aux.declare(C, kind="control_variate")
        run.server.aux.declare(DC, kind="control_variate_delta")

    @fedcore.hookimpl
    def fedcore_aggregate(self, model: nn.Module, updates: Sequence[ClientUpdate], ctx: RoundContext
                          ) -> AggregateResult:
        deltas = changes(model, updates, "scaffold")
        w = client_weights(updates, self.weighting)
        state = move(model, updates, deltas, [self.server_lr * wi for wi in w])
        aux = ctx.server.aux
        n_clients = ctx.run.num_clients if ctx.run is not None else len(updates)
        sums: dict[str, torch.Tensor] = {}
        dtypes: dict[str, torch.dtype] = {}
        for u in sorted(updates, key=lambda u: u.client_id):  # a fixed order: the float sum is order-free
            for name, dc in u.aux.items():
                if name.startswith(DC + "."):
                    entry = C + name[len(DC):]
                    dtypes[entry] = dc.dtype  # c is kept in the entry's own precision
                    sums[entry] = sums.get(entry, torch.zeros_like(dc, dtype=torch.float64)) + dc.to(torch.float64)
        sq = 0.0
        for entry, total in sums.items():
            old = aux.get(entry, default=None)
            base = torch.zeros_like(total) if old is None else old.to(torch.float64)
            new = base + total / n_clients
            aux.keep(entry, new.to(dtypes[entry]), send=True)
            sq += float((new**2).sum())
        return AggregateResult(state=state, metrics={"control_variate_norm": math.sqrt(sq)})
