"""FedV's server: one shared encoder, fixed during a round, updated once per round (Alg. 1 l.19).

Each sampled client contributes one encoder-gradient sample from its last minibatch (``batch_policy="last"``,
Alg. 1 l.10), computed with the head and tail that produced that batch's loss (before the step-K
update, Sec. 3.2):

* ``mode="exact"`` (FedV, Option I, Eq. 4): ``dL/dw_E`` from the same backward that returns ``dL/dh``.
* ``mode="zo"`` (FedVZ, Option II, Eq. 5): the server perturbs its weights along Gaussian ``z`` drawn
  from a seed it keeps, sends ``E(w +- eps z; h)`` down, and gets two losses back: no gradient of
  the encoder is ever formed or sent. ``g_i = (L+ - L-) / (2 eps) z``.

At aggregation ``w_E <- w_E - lr_t / m * sum_i g_i`` over the clients whose updates arrived
(``lr_t = lr * decay ** (round // decay_every)``), with SGD or a persistent Adam. Under asynchronous
schedules a client's contribution may arrive rounds late: it joins the mean scaled by ``(1 + tau) ** -0.5``
(the mean still divides by the number of contributions, so late ones pull less).
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
import copy
from typing import cast

import torch
from torch import nn
from torch.func import functional_call

from fedcore.rng import derive_seed
from fedcore_fedv.spsa import SPSA
from fedcore_split import Segment, ServerRule, Session, SplitServerState, StaleSession, staleness_weight


class FedVServer(ServerRule):
    """The server rule of FedV (``mode="exact"``) and FedVZ (``mode="zo"``)."""

    def __init__(self, model: nn.Module, stages: Sequence[str], *, mode: str, lr: float, state: SplitServerState,
                 optimizer: str = "sgd", decay: float = 1.0, decay_every: int = 1, spsa: SPSA | None = None,
                 batch_policy: str = "last", shared_direction: bool = False, batch_every: int = 1, **kw) -> None:
        super().__init__(model, stages, **kw)
        self.name = "fedv-exact" if mode == "exact" else "fedvz-zo"
        self.mode, self.lr, self.state, self.optimizer = mode, lr, state, optimizer
        self.decay, self.decay_every = decay, decay_every
        self.spsa = spsa or SPSA()
        self.batch_policy = batch_policy
        self.batch_every = max(1, batch_every)
        self.shared_direction = shared_direction

    def segment_for(self, client_id: int) -> nn.Module:
        return Segment(self.model, {"server": self.stages}, share=True)  # the encoder is fixed within the round

    def _contributes(self, final: bool, step: int | None = None) -> bool:
        """Whether batch ``step`` (1-based; ``None`` = not known yet, before its forward) contributes."""
        if final or self.batch_policy == "all":
            return True
        if self.batch_policy == "every_n":
            return step is None or step % self.batch_every == 0
        return False

    # -- FedV: exact gradient --------------------------------------------------------------------

    def wants_param_grads(self, session: Session) -> bool:
        return self.mode == "exact" and self._contributes(session.final, session.steps)

    def needs_output_grad(self, final: bool) -> bool:
        return self.mode == "exact" and self._contributes(final)

    def on_param_grads(self, session: Session, grads: dict[str, torch.Tensor]) -> None:
        acc = session.scratch.setdefault("grads", [])
        acc.append({k: v.detach().clone() for k, v in grads.items()})

    # -- FedVZ: loss queries -----------------------------------------------------------------------

    def loss_queries(self, session: Session) -> list[torch.Tensor]:
        if self.mode != "zo" or not self._contributes(session.final, session.steps) or session.h is None:
            return []
        if session.scratch.get("queried") == session.steps:
            return []
        session.scratch["queried"] = session.steps
        who = "shared" if self.shared_direction else session.client_id
        seed = derive_seed(self.seed, "fedvz", self.round, who, session.steps)
        # only the parameters the step updates: finish() regenerates z over exactly these, in this order
        params = {n: p.detach() for n, p in session.segment.named_parameters() if p.requires_grad}
        seeds = self.spsa.seeds(seed)
        points = [pt for s in seeds for pt in self.spsa.points(params, s)]
        if self.spsa.estimator == "forward":
            points.append(params)
        session.segment.eval()  # identical stochasticity for the +- forwards (no dropout / drop-path)
        with torch.no_grad():
            outs = [functional_call(session.segment, pt, (session.h.detach(),)) for pt in points]
        session.segment.train(True)
        session.scratch["pending"] = seeds
        return outs

    def planned_queries(self, final: bool, step: int) -> int:
        """The outputs :meth:`loss_queries` returns after batch ``step``: the SPSA points (plus the base point of the
        forward estimator) at every contributing batch, none otherwise."""
        if self.mode != "zo" or not self._contributes(final, step):
            return 0
        per = 1 if self.spsa.estimator == "forward" else 2
        return self.spsa.num_directions * per + (1 if self.spsa.estimator == "forward" else 0)

    def on_losses(self, session: Session, losses: Sequence[float]) -> None:
        seeds = session.scratch.pop("pending")
        per = 2 if self.spsa.estimator == "central" else 1
        base = float(losses[-1]) if self.spsa.estimator == "forward" else None
        pgs = [self.spsa.projected(list(losses[k * per:(k + 1) * per]), base) for k in range(len(seeds))]
        session.scratch.setdefault("zo", []).append((seeds, pgs))

    # -- commit and the once-per-round step ----------------------------------------------------------

    def on_commit(self, session: Session) -> None:
        session.staged = session.scratch.get("grads") if self.mode == "exact" else session.scratch.get("zo")
        session.scratch = {}

    def _gradient(self, session: Session, params: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor] | None:
        staged = session.staged
        if not staged:
            return None
        if self.mode == "exact":
            return {k: cast(torch.Tensor, sum(g[k] for g in staged)) / len(staged) for k in params}
        parts = [self.spsa.gradient(params, seeds, pgs) for seeds, pgs in staged]
        return {k: cast(torch.Tensor, sum(p[k] for p in parts)) / len(parts) for k in params}

    def learning_rate(self) -> float:
        return self.lr * self.decay ** (self.round // max(1, self.decay_every))

    def finish(self, accepted: Sequence[int], weights: Mapping[int, float], stale: Sequence[StaleSession] = ()
               ) -> dict[str, torch.Tensor]:
        """One encoder step from the accepted clients' contributions; a late one is scaled by ``(1 + tau) ** -0.5``."""
        segment = Segment(self.model, {"server": self.stages}, share=True)
        params = {n: p.detach() for n, p in segment.named_parameters() if p.requires_grad}
        grads = [g for c in sorted(accepted) if c in self.committed
                 for g in [self._gradient(self.sessions[c], params)] if g is not None]
        for late in sorted(stale, key=lambda s: s.session.client_id):
            g = self._gradient(late.session, params)
            if g is not None:
                grads.append({k: v * staleness_weight(late.staleness) for k, v in g.items()})
        if not grads:
            return {}
        # uniform 1/m (Alg. 1 l.19)
        mean = {k: cast(torch.Tensor, sum(g[k] for g in grads)) / len(grads) for k in params}
        lr = self.learning_rate()
        if self.optimizer == "sgd":
            return {k: params[k] - lr * mean[k] for k in params}
        work = {k: nn.Parameter(v.clone()) for k, v in params.items()}
        opt = torch.optim.Adam(list(work.values()), lr=lr)
        if self.state.optimizer is not None:
            opt.load_state_dict(copy.deepcopy(self.state.optimizer))
            for group in opt.param_groups:
                group["lr"] = lr
        for k, p in work.items():
            p.grad = mean[k].clone()
        opt.step()
        self.state.optimizer = copy.deepcopy(opt.state_dict())
        return {k: p.detach() for k, p in work.items()}
