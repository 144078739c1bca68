"""The per-batch protocol between a client's segments and the server's segment.

A :class:`ServerRule` is the server side of a split model for one round: which weights each client's
batches run through and how those weights change (never, every step, once per round from staged
contributions). :class:`Endpoint` is what ``Share.endpoint`` holds; the local update opens a
:class:`Connection` on its own channel and every tensor that crosses (smashed data, server outputs,
output and input gradients, labels, losses, loss-query outputs) goes through ``channel.up/down``, so
the ledger counts exactly what was sent. A connection is a context manager: if the local update
raises inside it, the rule discards everything that client wrote on the server (``abort``), so a
client that drops mid-round leaves the server state consistent.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import attrs
import torch
from torch import nn

from fedcore_split.stages import Segment

# message kinds in the ledger
SMASHED = "smashed"              # up: the client's bottom output h
SERVER_OUT = "server-output"     # down: the server segment's output b
OUTPUT_GRAD = "output-grad"      # up: dL/db
INPUT_GRAD = "input-grad"        # down: dL/dh
LABELS = "labels"                # up: labels, two-part splits only (the server computes the loss)
LOSS = "loss"                    # down: the loss value, two-part splits only
QUERY_OUT = "query-output"       # down: server outputs for loss queries (zeroth-order estimates)
LOSSES = "losses"                # up: the client's loss values for those queries


class Session:
    """One client's use of the server in one round: its segment, the cached forward and what it staged."""

    def __init__(self, client_id: int, segment: nn.Module) -> None:
        self.client_id = client_id
        self.segment = segment
        self.h: torch.Tensor | None = None
        self.out: torch.Tensor | None = None
        self.final = False
        self.steps = 0
        self.examples = 0
        self.staged: Any = None
        self.scratch: dict[str, Any] = {}
        self.transcript: list[tuple[str, Any]] | None = None


@attrs.frozen(kw_only=True)
class StaleSession:
    """A session of an earlier round whose update arrived ``staleness`` rounds late (asynchronous schedules)."""

    session: Session
    staleness: int


def staleness_weight(tau: int) -> float:
    """The extra weight of a server contribution ``tau`` rounds late: ``(1 + tau) ** -0.5`` (1 when fresh)."""
    return float((1 + max(0, tau)) ** -0.5)


class ServerRule:
    """Base server rule: forward and input-only backward through one segment; subclasses add updates.

    ``model`` is the global model (read, never written during the round), ``stages`` the server's stages.
    ``finish(accepted)`` returns the new values of global entries, using only what clients in
    ``accepted`` (the updates that reached aggregation) committed.
    """

    name = "base"
    stale = "weight"
    """How late sessions are handled (:mod:`fedcore_split.finish`): ``"weight"`` (applied with a staleness
    weight in :meth:`finish`) or ``"drop"``."""

    def __init__(self, model: nn.Module, stages: Sequence[str], *, round: int = 0, seed: int = 0,
                 record: bool = False) -> None:
        self.model = model
        self.stages = tuple(stages)
        self.round = round
        self.seed = seed
        self.record = record
        self.sessions: dict[int, Session] = {}
        self.committed: list[int] = []
        self.transcripts: dict[int, list[tuple[str, Any]]] = {}
        self.repeated: list[Session] = []  # earlier committed sessions of clients started again this round

    # -- what subclasses choose ----------------------------------------------------------------

    def segment_for(self, client_id: int) -> nn.Module:
        """The weights this client's batches run through (default: the global weights, shared)."""
        return Segment(self.model, {"server": self.stages}, share=True)

    def wants_param_grads(self, session: Session) -> bool:
        return False

    def needs_output_grad(self, final: bool) -> bool:
        """Whether the server needs ``dL/db`` after this forward even when the client's bottom is not trained."""
        return False

    def on_param_grads(self, session: Session, grads: dict[str, torch.Tensor]) -> None:
        """Receive ``dL/dw`` of the server segment for the last batch (only if :meth:`wants_param_grads`)."""

    def loss_queries(self, session: Session) -> list[torch.Tensor]:
        """Outputs the server wants the client to score with its loss now (after a backward)."""
        return []

    def on_losses(self, session: Session, losses: Sequence[float]) -> None:
        """The client's losses for the outputs of :meth:`loss_queries`."""

    def planned_queries(self, final: bool, step: int) -> int:
        """How many outputs :meth:`loss_queries` will return after batch ``step`` (1-based), for a dry run."""
        return 0

    def on_commit(self, session: Session) -> None:
        """The client finished its local update without raising."""

    def on_abort(self, session: Session) -> None:
        """The client raised: undo whatever its session changed on the server."""

    def finish(self, accepted: Sequence[int], weights: Mapping[int, float], stale: Sequence[StaleSession] = ()
               ) -> dict[str, torch.Tensor]:
        """New global values of server entries from the committed sessions of ``accepted`` clients.

        ``stale``: sessions of earlier rounds that arrive now (only for ``stale = "weight"`` rules).
        """
        return {}

    # -- the protocol ---------------------------------------------------------------------------

    def open(self, client_id: int) -> Session:
        if client_id in self.sessions and client_id in self.committed:
            # restarted on the same version (a continuous policy refilled before aggregating): the first
            # session's contribution stays, as a session of this round (see fedcore_split.finish)
            self.repeated.append(self.sessions.pop(client_id))
            self.committed.remove(client_id)
        session = Session(client_id, self.segment_for(client_id))
        if self.record:
            session.transcript = self.transcripts.setdefault(client_id, [])
        self.sessions[client_id] = session
        return session

    def close(self, session: Session, failed: bool) -> None:
        if failed:
            self.on_abort(session)
            self.sessions.pop(session.client_id, None)
        else:
            self.on_commit(session)
            self.committed.append(session.client_id)

    def _params(self, session: Session) -> list[tuple[str, nn.Parameter]]:
        return [(n, p) for n, p in session.segment.named_parameters() if p.requires_grad]

    def forward(self, session: Session, h: torch.Tensor, *, grad: bool, final: bool, cache: bool = True
                ) -> torch.Tensor:
        """``cache=False`` for extra queries (a client's activation-space estimate): nothing is remembered."""
        session.segment.train(True)
        h = h.detach().requires_grad_(grad)
        with torch.set_grad_enabled(grad):
            out = session.segment(h)
        if cache:
            session.h, session.out, session.final = h, (out if grad else None), final
            session.steps += 1
            session.examples += len(h)
        return out.detach()

    def _grads(self, session: Session, root: torch.Tensor, grad_out: torch.Tensor | None) -> torch.Tensor:
        assert session.h is not None, "backward without a forward"
        named = self._params(session) if self.wants_param_grads(session) else []
        inputs = [session.h] + [p for _, p in named]
        grads = torch.autograd.grad(root, inputs, grad_outputs=grad_out, allow_unused=True)
        if named:
            self.on_param_grads(session, {n: (torch.zeros_like(p) if g is None else g)
                                          for (n, p), g in zip(named, grads[1:])})
        return grads[0]

    def backward(self, session: Session, grad_out: torch.Tensor) -> torch.Tensor:
        assert session.out is not None, "backward without a forward"
        grad_h = self._grads(session, session.out, grad_out)
        session.out = None  # free the graph; h stays cached for loss queries
        return grad_h

    def loss_backward(self, session: Session, h: torch.Tensor, y: torch.Tensor, *, final: bool
                      ) -> tuple[float, torch.Tensor]:
        self.forward(session, h, grad=True, final=final)
        assert session.out is not None
        loss = nn.functional.cross_entropy(session.out, y)
        grad_h = self._grads(session, loss, None)
        session.out = None
        return float(loss.detach()), grad_h


class Connection:
    """A client's session with the server for one local update. Use it as a context manager."""

    def __init__(self, rule: ServerRule, client_id: int, channel: Any) -> None:
        if channel is None:
            raise RuntimeError("split learning needs the client's channel: call share.endpoint.connect(ctx.channel) "
                               "inside fedcore_local_update, where ctx is bound to the client")
        self.rule = rule
        self.client_id = client_id
        self.channel = channel
        self.session: Session | None = None

    def __enter__(self) -> Connection:
        self.session = self.rule.open(self.client_id)
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        assert self.session is not None
        self.rule.close(self.session, failed=exc_type is not None)

    def _log(self, kind: str, payload: Any) -> None:
        if self.session is not None and self.session.transcript is not None:
            self.session.transcript.append((kind, payload))

    def _up(self, kind: str, payload: Any) -> Any:
        out = self.channel.up(kind, payload)
        self._log(kind, out)
        return out

    def _down(self, kind: str, payload: Any) -> Any:
        self._log(kind, payload)
        return self.channel.down(kind, payload)

    def _live(self) -> Session:
        if self.session is None:
            raise RuntimeError("use the connection inside `with endpoint.connect(channel) as server:`")
        return self.session

    def forward(self, h: torch.Tensor, *, final: bool = False, grad: bool = True, cache: bool = True) -> torch.Tensor:
        """Send ``h`` up, get the server segment's output back.

        ``grad=False``: no backward follows; ``cache=False``: an extra query that is not this batch's forward.
        """
        session = self._live()
        out = self.rule.forward(session, self._up(SMASHED, h), grad=grad, final=final, cache=cache)
        return self._down(SERVER_OUT, out)

    def backward(self, grad_out: torch.Tensor) -> torch.Tensor:
        """Send ``dL/db`` up, get ``dL/dh`` back; the rule may update or stage server weights here."""
        session = self._live()
        grad_h = self.rule.backward(session, self._up(OUTPUT_GRAD, grad_out))
        return self._down(INPUT_GRAD, grad_h)

    def loss_and_backward(self, h: torch.Tensor, y: torch.Tensor, *, final: bool = False
                          ) -> tuple[float, torch.Tensor]:
        """Two-part split: send ``h`` and the labels up; the server computes the loss and returns ``dL/dh``."""
        session = self._live()
        loss, grad_h = self.rule.loss_backward(session, self._up(SMASHED, h), self._up(LABELS, y), final=final)
        return self._down(LOSS, loss), self._down(INPUT_GRAD, grad_h)

    def needs_backward(self, final: bool = False) -> bool:
        """Whether the server needs ``dL/db`` for this batch (to update itself), whatever the client needs."""
        return self.rule.needs_output_grad(final)

    def loss_queries(self) -> list[torch.Tensor]:
        """Outputs the server asks the client to score (empty unless the rule wants a loss query now)."""
        outs = self.rule.loss_queries(self._live())
        return list(self._down(QUERY_OUT, list(outs))) if outs else []

    def answer(self, losses: Sequence[float]) -> None:
        """Send the losses of :meth:`loss_queries`' outputs up (scalars only: no gradient leaves the client)."""
        self.rule.on_losses(self._live(), self._up(LOSSES, [float(v) for v in losses]))


class Endpoint:
    """``Share.endpoint`` of a split share: the server side one client talks to this round."""

    def __init__(self, rule: ServerRule, client_id: int) -> None:
        self.rule = rule
        self.client_id = client_id

    def connect(self, channel: Any) -> Connection:
        return Connection(self.rule, self.client_id, channel)
