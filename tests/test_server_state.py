"""The server-state channel (``ServerState.aux``, ``Share.aux``, ``ClientUpdate.aux``) carries a method's state.

``Drift`` is a SCAFFOLD-shaped test method built only on the public API: the server keeps a control variate for
every client (``drift.c``, shared) and a count per client (``drift.seen``, per client), sends both down with each
share, and receives each client's control-variate delta (``drift.dc``) up; each client keeps its own variate in
``ClientState.tensors``. Both directions change the trained weights, so a resume that lost any of it would differ.
The run is checked under all four scheduler families with ``fedcore.testing``'s resume harness (stop after a
round, resume from the checkpoint, compare history, ledger, weights and participation), and its traffic is booked
under its own ledger kinds.
"""
from __future__ import annotations

import tempfile

import attrs
import pytest
import torch

import fedcore
from fedcore.builtin import SGDUpdate
from fedcore.engine.checkpoint import Checkpointer
from fedcore.runtime import Faults, SimClock
from fedcore.testing import ContractFixture, run_tiny_pipeline
from fedcore.testing.executor import PROFILES, ROUNDS, SCHEDULES, assert_same_run
from fedcore.types import ClientUpdate, ServerTensors

C, DC, SEEN = "drift.c", "drift.dc", "drift.seen"
FX = ContractFixture(num_clients=6)


@attrs.frozen(eq=False, kw_only=True)
class DriftUpdate:
    """Local SGD corrected by ``c - c_i`` (SCAFFOLD's option II, scaled down), uploading ``Δc_i`` as aux."""

    lr: float = 0.05
    correction: float = 0.5

    @fedcore.hookimpl
    def fedcore_local_update(self, client, share, data, state, ctx):
        start = {k: v.detach().clone() for k, v in share.module.state_dict().items() if k in share.upload}
        trained = SGDUpdate(lr=self.lr, batch_size=16).fedcore_local_update(
            client=client, share=share, data=data, state=state, ctx=ctx)
        seen = float(share.aux[SEEN]) if SEEN in share.aux else 0.0
        tensors, c_new, dc = {}, {}, {}
        for k, w in trained.tensors.items():
            if not w.is_floating_point():
                tensors[k] = w
                continue
            c = share.aux.get(f"{C}.{k}", torch.zeros_like(w))
            c_i = state.tensors.get(f"{C}.{k}", torch.zeros_like(w))
            tensors[k] = w - self.correction * (c - c_i) / (1.0 + seen)
            c_new[k] = c_i - c + (start[k] - tensors[k]) / self.lr
            dc[f"{DC}.{k}"] = c_new[k] - c_i
        state.tensors.update({f"{C}.{k}": v for k, v in c_new.items()})
        return ClientUpdate(tensors=tensors, num_examples=trained.num_examples, metrics=trained.metrics, aux=dc)


@attrs.frozen(eq=False, kw_only=True)
class DriftServer:
    """Keeps the shared control variate and a per-client count on the server (an observer: any aggregator works)."""

    @fedcore.hookimpl
    def fedcore_run_start(self, run):
        run.server.aux.declare(C, kind="control_variate")  # a dotted prefix: every drift.c.<entry>
        run.server.aux.declare(DC, kind="control_variate_delta")
        run.server.aux.declare(SEEN, kind="drift_count")

    @fedcore.hookimpl
    def fedcore_client_done(self, client, update, ctx):
        aux: ServerTensors = ctx.run.server.aux
        n = ctx.run.num_clients
        for name, delta in update.aux.items():
            entry = C + name[len(DC):]
            aux.keep(entry, aux.get(entry, default=torch.zeros_like(delta)) + delta / n, send=True)
        aux.keep_for(client.id, SEEN, aux.get(SEEN, client.id, torch.tensor(0.0)) + 1, send=True)


def drift_run(schedule: str, update: DriftUpdate | None = None, **kwargs):
    profiles = [PROFILES[c % len(PROFILES)] for c in range(FX.num_clients)]
    return run_tiny_pipeline([*SCHEDULES[schedule](), update or DriftUpdate(), DriftServer()], rounds=ROUNDS,
                             fixture=FX,
                             clock=SimClock(), profiles=profiles, faults=Faults(dropout_during=0.2, lost_upload=0.1),
                             **kwargs)


class _Stop(Exception):
    pass


def _server_state(result) -> dict[str, torch.Tensor]:
    aux = result.run.server.aux
    return {**aux.shared, **{f"{c}/{k}": v for c, t in aux.per_client.items() for k, v in t.items()}}


def _client_state(result) -> dict[str, torch.Tensor]:
    return {f"{c}/{k}": v for c, s in result.run.client_states.items() for k, v in s.tensors.items()}


def _same(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> bool:
    return set(a) == set(b) and all(torch.equal(a[k], b[k]) for k in a)


@pytest.fixture(scope="module")
def straight():
    return {schedule: drift_run(schedule) for schedule in SCHEDULES}


@pytest.mark.parametrize("schedule", list(SCHEDULES))
def test_the_method_keeps_server_and_client_state_and_resumes_exactly(schedule, straight):
    want = straight[schedule]
    assert _server_state(want) and _client_state(want), "the method kept no state"
    with tempfile.TemporaryDirectory(prefix="fedcore-aux-") as root:
        def stop(row):
            if row["round"] == 2:  # this row is lost with the crash; round 1's checkpoint (jobs may be in flight) stays
                raise _Stop

        with pytest.raises(_Stop):
            drift_run(schedule, checkpoint=Checkpointer(root, every=1), on_round=stop)
        resumed = drift_run(schedule, checkpoint=Checkpointer(root, every=1, resume=True))
    assert_same_run(resumed, want, f"{schedule} schedule, stopped after round 1 and resumed")
    assert _same(_server_state(resumed), _server_state(want)), "the server-held state differs after the resume"
    assert _same(_client_state(resumed), _client_state(want)), "the client-held state differs after the resume"
    assert resumed.run.server.aux.kinds == want.run.server.aux.kinds
    assert resumed.run.server.aux.send == want.run.server.aux.send


def test_the_state_is_booked_under_its_own_ledger_kinds(straight):
    result = straight["sync"]
    rows = result.ledger.to_rows()
    kinds = {(r["direction"], r["kind"]) for r in rows}
    assert {("down", "control_variate"), ("down", "drift_count"), ("up", "control_variate_delta")} <= kinds
    assert not any(r["kind"] == "aux" for r in rows), "every server-state tensor declared its kind"
    n_params = sum(v.numel() for v in result.model.state_dict().values() if v.is_floating_point())
    ups = [r for r in rows if r["kind"] == "control_variate_delta"]
    assert ups and all(r["nbytes"] == 4 * n_params for r in ups)  # one float32 delta per weight
    # round 0 sends nothing (the server holds no state yet); later rounds send c to every dispatched client
    assert min(r["round"] for r in rows if r["kind"] == "control_variate") == 1


def test_the_server_state_changes_training():
    """The channel is not decoration: without the correction the weights differ."""
    with_state = drift_run("sync")
    plain = drift_run("sync", update=DriftUpdate(correction=0.0))
    assert any(not torch.equal(v, plain.model.state_dict()[k]) for k, v in with_state.model.state_dict().items())


def test_server_tensors_send_declared_names_and_a_client_own_tensor_wins():
    aux = ServerTensors()
    assert not aux
    aux.keep("m.c", torch.ones(2), kind="control_variate", send=True)
    aux.keep("m.private", torch.zeros(1), kind="server_only")
    aux.keep_for(3, "m.c", torch.full((2,), 7.0))
    assert list(aux.download_for(0)) == ["m.c"] and torch.equal(aux.download_for(0)["m.c"], torch.ones(2))
    assert torch.equal(aux.download_for(3)["m.c"], torch.full((2,), 7.0))
    assert aux.kind_of("m.c") == "control_variate" and aux.kind_of("m.unknown") == "aux"
    assert aux.kind_of("m.c.0.weight") == "control_variate"  # a dotted prefix covers the names under it
    aux.keep("m.c", torch.ones(2), send=False)
    assert aux.download_for(0) == {}
    with pytest.raises(ValueError, match="its own ledger kind"):
        aux.declare("m.w", kind="weights")
