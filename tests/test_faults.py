"""Seeded faults: offline clients, mid-round dropouts, lost uploads, raising clients; what the ledger and history
say."""
import attrs
import pytest
import torch

import fedcore
from fedcore.builtin import FedAvg, SemiAsyncSchedule, SGDUpdate
from fedcore.errors import ConfigError
from fedcore.runtime import DeviceProfile, Faults, SimClock
from fedcore.runtime.faults import count_outcomes
from fedcore.testing import ContractFixture, run_tiny_pipeline

FIXTURE = ContractFixture(num_clients=6)
DEV = DeviceProfile(name="dev", flops=1e9, up_bps=1e6, down_bps=1e6, memory_bytes=2**30)


def test_plans_are_seeded_and_follow_the_rates():
    f = Faults(dropout_before=0.2, dropout_during=0.3, lost_upload=0.1)
    plans = [f.plan(seed=0, round=r, client=c) for r in range(100) for c in range(20)]
    again = [f.plan(seed=0, round=r, client=c) for r in range(100) for c in range(20)]
    assert plans == again
    counts = count_outcomes(plans)
    assert counts["unavailable"] == pytest.approx(400, rel=0.15)
    assert counts["dropout"] == pytest.approx(0.8 * 0.3 * 2000, rel=0.15)
    assert counts["lost"] == pytest.approx(0.8 * 0.7 * 0.1 * 2000, rel=0.25)
    assert all(0 <= p.fraction <= 1 for p in plans)
    assert [f.plan(seed=1, round=r, client=0) for r in range(100)] != plans[::20]
    half = Faults(use_availability=True)
    off = count_outcomes([half.plan(seed=0, round=r, client=0, availability=0.5) for r in range(400)])
    assert off["unavailable"] == pytest.approx(200, rel=0.2)
    with pytest.raises(ConfigError, match="dropout_during"):
        Faults(dropout_during=1.5)
    with pytest.raises(ConfigError, match="first_round"):
        Faults(outages=[(0, 5, 2)])


def test_outages_keep_clients_offline_for_their_window():
    f = Faults.random_outage(num_clients=20, fraction=0.1, first_round=3, rounds=5, seed=0)
    assert len(f.outages) == 2
    c = f.outages[0][0]
    assert ([f.plan(seed=0, round=r, client=c).outcome for r in range(10)]
            == ["ok"] * 3 + ["unavailable"] * 5 + ["ok"] * 2)


def faulty_run(**kw):
    faults = Faults(dropout_before=0.15, dropout_during=0.2, lost_upload=0.15)
    return run_tiny_pipeline([], rounds=6, fixture=FIXTURE, faults=faults, clock=SimClock({"dev": DEV}),
                             profiles=["dev"] * 6, **kw)


def test_history_and_ledger_say_what_happened():
    result = faulty_run()
    h, ledger = result.history, result.ledger
    seen = {k for r in h for k in ("unavailable", "dropout", "lost") if k in r}
    assert seen == {"unavailable", "dropout", "lost"}
    weights = sum(v.numel() * 4 for v in result.model.state_dict().values())
    for r in h:
        rnd = r["round"]
        for c in r.get("unavailable", []):  # offline: nothing sent either way
            assert ledger.total(round=rnd, client=c) == 0
        for c in r.get("dropout", []):  # downloaded, never uploaded
            assert ledger.total(round=rnd, client=c, direction="down") == weights
            assert ledger.total(round=rnd, client=c, direction="up") == 0
        for c in r.get("lost", []):  # uploaded (bytes spent) but never aggregated
            assert ledger.total(round=rnd, client=c, direction="up") == weights
            assert c not in r["clients"]
        assert set(r["clients"]).isdisjoint(r.get("dropout", []) + r.get("unavailable", []))
    again = faulty_run()
    assert again.history.comparable() == h.comparable()


def test_dropout_does_not_commit_client_state_and_lost_upload_does():
    h = faulty_run().history
    result = faulty_run()
    counts = {c: 0 for c in range(6)}
    for r in h:
        for c in r["clients"] + r.get("lost", []):
            counts[c] += 1
    assert {c: s.rounds_participated for c, s in result.run.client_states.items()} == counts


@attrs.frozen(eq=False)
class Spy:
    """Remembers every update the server received and the global model after every round."""

    received: list = attrs.field(factory=list)
    models: list = attrs.field(factory=list)

    @fedcore.hookimpl
    def fedcore_client_done(self, client, update, ctx):
        self.received.append((ctx.round, update))

    @fedcore.hookimpl
    def fedcore_round_end(self, ctx, record):
        self.models.append({k: v.clone() for k, v in ctx.server.model.state_dict().items()})


def test_each_round_aggregates_exactly_the_updates_that_arrived():
    """Faults never remove what arrived: each round's model is FedAvg of its arrived updates, or unchanged."""
    spy = Spy()
    result = run_tiny_pipeline([spy], rounds=6, fixture=FIXTURE, faults=Faults(dropout_during=0.4, lost_upload=0.3),
                               clock=SimClock({"dev": DEV}), profiles=["dev"] * 6)
    for row, model in zip(result.history, spy.models):
        updates = [u for rnd, u in spy.received if rnd == row["round"]]
        assert sorted(u.client_id for u in updates) == row["clients"]
        if not updates:
            if row["round"] == 0:
                continue
            previous = spy.models[row["round"] - 1]
            assert all(torch.equal(previous[k], model[k]) for k in model)
            continue
        expected = FedAvg().fedcore_aggregate(model=None, updates=updates, ctx=None).state
        assert all(torch.allclose(expected[k], model[k]) for k in expected)
    assert any(not r["clients"] for r in result.history) or any("lost" in r for r in result.history)


class Boom:
    """Local update that raises for client 1 and trains normally otherwise."""

    @fedcore.hookimpl
    def fedcore_local_update(self, client, share, data, state, ctx):
        if client.id == 1:
            raise RuntimeError("battery died")
        return SGDUpdate().fedcore_local_update(client=client, share=share, data=data, state=state, ctx=ctx)


def test_a_raising_client_is_a_reported_failure_not_a_crash(caplog):
    boom = attrs.frozen(eq=False)(Boom)()
    with caplog.at_level("WARNING", logger="fedcore"):
        result = run_tiny_pipeline([boom, SemiAsyncSchedule(mu=0.5)], rounds=3, fixture=FIXTURE,
                                   clock=SimClock({"dev": DEV}), profiles=["dev"] * 6)
    failed = [f for r in result.history for f in r.get("failed", [])]
    assert failed and all(f["client"] == 1 and "battery died" in f["error"] for f in failed)
    assert "Traceback" in caplog.text and "client 1 failed" in caplog.text
    assert all(1 not in r["clients"] for r in result.history)


def test_no_fault_run_is_unchanged_by_an_all_zero_fault_model():
    a = run_tiny_pipeline([FedAvg()], rounds=2, fixture=FIXTURE)
    b = run_tiny_pipeline([FedAvg()], rounds=2, fixture=FIXTURE, faults=Faults())
    assert a.history.comparable() == b.history.comparable()
