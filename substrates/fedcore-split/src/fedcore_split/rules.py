"""Server rules of the split-learning baselines: a frozen server, SplitFed V1 and SplitFed V2 / vanilla SL.

* :class:`FrozenServer` never changes the server segment (a control: what the clients' segments
  alone achieve on a fixed, e.g. pre-trained, server segment).
* :class:`ServerCopies` (SplitFed V1, Thapa et al., AAAI 2022): each client's batches run through
  its own copy of the server segment, stepped after every batch; at aggregation the copies of the
  accepted clients are averaged (weighted like the client segments).
* :class:`SequentialServer` (SplitFed V2, and vanilla split learning): one server segment stepped
  after every batch of every client, in the order the clients ran; its optimizer state persists
  across rounds. A client that raises is rolled back at once; an update rejected later truncates
  the chain at that client (the steps of clients after it were taken on top of its steps).

Under asynchronous schedules a session may arrive rounds late (:mod:`fedcore_split.finish`): a late
copy joins the average with the extra weight ``(1 + tau) ** -0.5``; late sequential steps are dropped.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
import copy

import torch
from torch import nn

from fedcore.training import make_optimizer
from fedcore_split.endpoint import ServerRule, Session, StaleSession, staleness_weight
from fedcore_split.stages import Segment
from fedcore_split.state import SplitServerState


def _step(opt: torch.optim.Optimizer, params: Sequence[tuple[str, nn.Parameter]], grads: Mapping[str, torch.Tensor]
          ) -> None:
    for name, p in params:
        p.grad = grads[name].detach().clone()
    opt.step()
    opt.zero_grad(set_to_none=True)


def _float_state(module: nn.Module) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in module.state_dict().items() if v.is_floating_point()}


class FrozenServer(ServerRule):
    """The server segment never changes (forward and input-gradient backward only); a late session loses nothing."""

    name = "frozen"


class ServerCopies(ServerRule):
    """SplitFed V1: a copy of the server segment per client, stepped per batch, averaged at aggregation."""

    name = "copies"

    def __init__(self, model: nn.Module, stages: Sequence[str], *, lr: float, optimizer: str = "sgd",
                 momentum: float = 0.0, **kw) -> None:
        super().__init__(model, stages, **kw)
        self.lr, self.optimizer, self.momentum = lr, optimizer, momentum

    def segment_for(self, client_id: int) -> nn.Module:
        return Segment(self.model, {"server": self.stages})

    def wants_param_grads(self, session: Session) -> bool:
        return True

    def needs_output_grad(self, final: bool) -> bool:
        return True

    def on_param_grads(self, session: Session, grads: dict[str, torch.Tensor]) -> None:
        params = self._params(session)
        if "opt" not in session.scratch:
            session.scratch["opt"] = make_optimizer(self.optimizer, [p for _, p in params], self.lr, self.momentum)
        _step(session.scratch["opt"], params, grads)

    def on_commit(self, session: Session) -> None:
        session.staged = _float_state(session.segment)
        session.segment, session.scratch = nn.Module(), {}  # keep only the weights until aggregation

    def finish(self, accepted: Sequence[int], weights: Mapping[int, float], stale: Sequence[StaleSession] = ()
               ) -> dict[str, torch.Tensor]:
        """The weighted mean of the accepted copies; a stale copy's weight is multiplied by ``(1 + tau) ** -0.5``."""
        done = [(self.sessions[c], weights.get(c, 1.0)) for c in sorted(accepted)
                if c in self.committed and self.sessions[c].staged is not None]
        done += [(s.session, weights.get(s.session.client_id, 1.0) * staleness_weight(s.staleness))
                 for s in sorted(stale, key=lambda s: s.session.client_id) if s.session.staged is not None]
        if not done:
            return {}
        total = sum(w for _, w in done)
        out: dict[str, torch.Tensor] = {}
        for session, w in done:
            for k, v in session.staged.items():
                acc = out.setdefault(k, torch.zeros_like(v, dtype=torch.float64))
                acc.add_(v.to(torch.float64), alpha=w / total)
        return {k: v.to(torch.float32) for k, v in out.items()}


class SequentialServer(ServerRule):
    """SplitFed V2 / vanilla SL: one server segment, stepped after every client batch, in arrival order."""

    name = "sequential"
    stale = "drop"  # a late session's steps were taken on a segment that has since been replaced

    def __init__(self, model: nn.Module, stages: Sequence[str], *, lr: float, state: SplitServerState,
                 optimizer: str = "sgd", momentum: float = 0.0, **kw) -> None:
        super().__init__(model, stages, **kw)
        self.state = state
        self.work = Segment(model, {"server": stages})
        self.named = [(n, p) for n, p in self.work.named_parameters() if p.requires_grad]
        self.opt = make_optimizer(optimizer, [p for _, p in self.named], lr, momentum)
        if state.optimizer is not None:
            self.opt.load_state_dict(copy.deepcopy(state.optimizer))
        self.chain: list[tuple[int, dict]] = []  # (client, snapshot taken before its session)

    def _snapshot(self) -> dict:
        return {"weights": _float_state(self.work), "opt": copy.deepcopy(self.opt.state_dict())}

    def _restore(self, snap: dict) -> None:
        self.work.load_state_dict(snap["weights"], strict=False)
        self.opt.load_state_dict(copy.deepcopy(snap["opt"]))

    def segment_for(self, client_id: int) -> nn.Module:
        return self.work

    def open(self, client_id: int) -> Session:
        session = super().open(client_id)
        session.scratch["before"] = self._snapshot()
        return session

    def wants_param_grads(self, session: Session) -> bool:
        return True

    def needs_output_grad(self, final: bool) -> bool:
        return True

    def on_param_grads(self, session: Session, grads: dict[str, torch.Tensor]) -> None:
        _step(self.opt, self.named, grads)

    def on_abort(self, session: Session) -> None:
        self._restore(session.scratch.pop("before"))

    def on_commit(self, session: Session) -> None:
        self.chain.append((session.client_id, session.scratch.pop("before")))

    def finish(self, accepted: Sequence[int], weights: Mapping[int, float], stale: Sequence[StaleSession] = ()
               ) -> dict[str, torch.Tensor]:
        for client, before in self.chain:
            if client not in accepted:  # its steps, and every later client's, are built on an update that was dropped
                self._restore(before)
                break
        self.state.optimizer = copy.deepcopy(self.opt.state_dict())
        return _float_state(self.work) if self.chain else {}
