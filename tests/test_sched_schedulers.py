"""Schedulers on a virtual clock: sync with a deadline, FedAsync, FedBuff, semi-async; staleness-aware aggregators."""
import math

import attrs
import numpy as np
import pytest
import torch

import fedcore
from fedcore.builtin import (
    AsyncSchedule,
    BufferedSchedule,
    FedAsyncMix,
    FedAvg,
    FedBuffStep,
    SemiAsyncSchedule,
    UniformSync,
    staleness_weight,
)
from fedcore.builtin.semi_async import SemiAsyncRounds
from fedcore.errors import ConfigError
from fedcore.runtime import DeviceProfile, SimClock
from fedcore.testing import ContractFixture, run_tiny_pipeline, tiny_model
from fedcore.types import ClientUpdate

FAST = DeviceProfile(name="fast", flops=1e9, up_bps=1e6, down_bps=1e6, memory_bytes=2**30)
TABLE = {"fast": FAST, "slow": FAST.scaled(speed=0.1, bandwidth=0.1, name="slow")}
PROFILES = ["fast"] * 4 + ["slow"] * 2
FIXTURE = ContractFixture(num_clients=6)


def run(schedule, *, aggregate=None, rounds=4, **kw):
    parts = [schedule] + ([aggregate] if aggregate is not None else [])
    return run_tiny_pipeline(parts, rounds=rounds, fixture=FIXTURE, clock=SimClock(TABLE), profiles=PROFILES, **kw)


def durations():
    """(fast, slow) job durations of one round on the fixture (every client holds 16 samples)."""
    rows = run(UniformSync(), rounds=1).history
    slow = rows[0]["virtual_time"]
    return slow / 10, slow


def test_sync_waits_for_everyone_without_a_deadline():
    h = run(UniformSync()).history
    assert all(r["clients"] == list(range(6)) for r in h)
    fast, slow = durations()
    assert [r["virtual_time"] for r in h] == pytest.approx([slow * (i + 1) for i in range(4)])
    assert h[-1]["ru"] == pytest.approx((4 * fast + 2 * slow) / (6 * slow))


def test_sync_deadline_drops_stragglers_each_round():
    fast, slow = durations()
    deadline = (fast + slow) / 2
    result = run(UniformSync(deadline=deadline))
    h, ledger = result.history, result.ledger
    for i, r in enumerate(h):
        assert r["clients"] == [0, 1, 2, 3]
        assert r["cancelled"] == [4, 5]
        assert r["virtual_time"] == pytest.approx(deadline * (i + 1))
        for c in (4, 5):  # a cancelled straggler downloaded its share but never uploaded
            assert ledger.total(round=i, client=c, direction="down") > 0
            assert ledger.total(round=i, client=c, direction="up") == 0
    assert "max_staleness" not in h[-1]  # synchronous: nothing stale is ever aggregated


def test_semi_async_waits_for_mu_n_then_t_clk_and_stragglers_arrive_stale():
    fast, slow = durations()
    h = run(SemiAsyncSchedule(mu=0.5, t_clk=fast / 2), rounds=12).history
    assert h[0]["clients"] == [0, 1, 2, 3]  # 3 = ceil(0.5*6) arrivals, then T_clk more: the 4th fast one too
    assert h[0]["virtual_time"] == pytest.approx(fast * 1.5)
    stale = [r for r in h if 4 in r["clients"]]
    assert stale and stale[0]["max_staleness"] >= 1
    assert not any("dropped" in r or "cancelled" in r for r in h)  # stragglers are never cancelled
    bounded = run(SemiAsyncSchedule(mu=0.5, t_clk=fast / 2, max_staleness=0), rounds=12).history
    assert any(4 in r.get("dropped", []) for r in bounded) and not any(4 in r["clients"] for r in bounded)


def test_semi_async_policy_sequence():
    policy = SemiAsyncRounds(need=2, t_clk=5.0, close_early=True)
    assert policy.dispatch(round=0, now=0.0, idle=[3, 1, 2], busy=[], rng=np.random.default_rng(0)) == [1, 2, 3]
    u = ClientUpdate(client_id=0, tensors={}, num_examples=1)
    assert policy.ready(now=1.0, arrived=[u], busy=[1, 2], since=0.0) is False
    assert policy.ready(now=2.0, arrived=[u, u], busy=[1], since=0.0) == 7.0
    assert policy.ready(now=3.0, arrived=[u, u], busy=[1], since=0.0) == 7.0  # the timeout does not move
    assert policy.ready(now=4.0, arrived=[u, u, u], busy=[], since=0.0) is True  # close early: nobody busy
    assert policy.state_dict() == {"deadline": 7.0}


def test_fedbuff_aggregates_every_k_and_fedasync_every_arrival():
    buffered = run(BufferedSchedule(buffer_size=2, concurrency=4), rounds=12).history
    assert all(len(r["clients"]) == 2 for r in buffered)
    assert any(r.get("max_staleness", 0) >= 1 for r in buffered)
    fedasync = run(AsyncSchedule(), rounds=8).history
    assert all(len(r["clients"]) == 1 for r in fedasync)
    times = [r["virtual_time"] for r in fedasync]
    assert times == sorted(times)


@pytest.mark.parametrize("schedule", [UniformSync(deadline=1.0), AsyncSchedule(concurrency=3),
                                      BufferedSchedule(buffer_size=2), SemiAsyncSchedule(mu=0.5, t_clk=0.1)],
                         ids=["sync-deadline", "async", "buffered", "semi-async"])
@pytest.mark.parametrize("aggregate", [FedAvg(), FedAsyncMix(), FedBuffStep()], ids=["fedavg", "fedasync", "fedbuff"])
def test_every_schedule_runs_with_every_aggregator(schedule, aggregate):
    h = run(schedule, aggregate=aggregate, rounds=3).history
    assert len(h) == 3 and all(math.isfinite(r["test_loss"]) for r in h)


def test_asking_for_more_arrivals_than_clients_is_an_error_before_work():
    with pytest.raises(ConfigError, match="arrivals=7 waits for more arrivals than the 6 clients"):
        run(SemiAsyncSchedule(arrivals=7))
    with pytest.raises(ConfigError, match="buffer_size=7 waits for more arrivals than the 6 clients"):
        run(BufferedSchedule(buffer_size=7))
    with pytest.raises(ConfigError, match="could never fill"):
        run(BufferedSchedule(buffer_size=4, concurrency=3))
    with pytest.raises(ConfigError, match="concurrency=9"):
        run(AsyncSchedule(concurrency=9))
    with pytest.raises(ConfigError, match="deadline"):
        UniformSync(deadline=0.0)
    with pytest.raises(ConfigError, match="mu"):
        SemiAsyncSchedule(mu=1.5)


def test_staleness_functions():
    assert staleness_weight("constant", 9) == 1.0
    assert staleness_weight("polynomial", 3, a=0.5) == pytest.approx(0.5)
    assert staleness_weight("hinge", 4, a=1.0, b=4) == 1.0
    assert staleness_weight("hinge", 6, a=1.0, b=4) == pytest.approx(1 / 3)
    with pytest.raises(ConfigError, match="choose one of"):
        staleness_weight("exp", 1)


def _update(cid, value, base, staleness, n=10):
    return ClientUpdate(client_id=cid, num_examples=n, staleness=staleness,
                        tensors={k: torch.full_like(v, value) for k, v in base.items()},
                        base={k: torch.full_like(v, 0.0) for k, v in base.items()})


def test_fedasync_mixing_rule():
    model = tiny_model()
    current = {k: v.clone() for k, v in model.state_dict().items()}
    u = _update(0, 1.0, current, staleness=3)
    out = FedAsyncMix(alpha=0.6, staleness="polynomial", a=0.5).fedcore_aggregate(model=model, updates=[u], ctx=None)
    alpha = 0.6 * 0.5
    for k, v in out.state.items():
        assert torch.allclose(v, (1 - alpha) * current[k] + alpha * 1.0, atol=1e-6)


def test_fedbuff_step_applies_discounted_deltas_to_the_current_model():
    model = tiny_model()
    current = {k: v.clone() for k, v in model.state_dict().items()}
    fresh, stale = _update(0, 1.0, current, staleness=0), _update(1, 2.0, current, staleness=3)
    out = FedBuffStep(server_lr=0.5).fedcore_aggregate(model=model, updates=[fresh, stale], ctx=None)
    step = 0.5 * (1.0 * 1.0 + 0.5 * 2.0) / 2  # deltas 1 and 2 (base 0), s(3) = 1/2, mean over K = 2
    for k, v in out.state.items():
        assert torch.allclose(v, current[k] + step, atol=1e-6)


def test_fedbuff_refills_at_once_so_a_fast_client_can_fill_the_buffer_alone():
    received = []

    class Spy:
        """Keeps every update the server receives."""

        @fedcore.hookimpl
        def fedcore_client_done(self, client, update, ctx):
            received.append(update)

    profiles = ["fast"] + ["slow"] * 5
    h = run_tiny_pipeline([BufferedSchedule(buffer_size=3), attrs.frozen(eq=False)(Spy)()], rounds=1, fixture=FIXTURE,
                          clock=SimClock(TABLE), profiles=profiles).history
    assert h[0]["clients"] == [0, 0, 0]  # started again on arrival, three times before any slow client is back
    first = received[0].tensors
    assert all(any(not torch.equal(first[k], u.tensors[k]) for k in first) for u in received[1:])  # fresh streams
