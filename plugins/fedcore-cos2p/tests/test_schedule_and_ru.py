"""Spec 004 §6 tests 8 (semi-async on a scripted timeline) and 9 (RU, Eq. 17), with the core's semi-async schedule."""
import attrs
import pytest

import fedcore
from fedcore.builtin import FedAvg, SemiAsyncSchedule, UniformSync
from fedcore.testing import ContractFixture, run_tiny_pipeline
from fedcore.types import AggregateResult
from fedcore_cos2p import ru_eq17, run_ru

SCRIPT = {0: 1.0, 1: 1.0, 2: 1.0, 3: 1.0, 4: 2.2, 5: 4.0}  # virtual seconds per job, by client


class ScriptedClock:
    """Every job of client c takes ``durations[c]`` virtual seconds."""

    def __init__(self, durations):
        self.durations = durations

    def duration(self, client, result, *, share, round):
        return self.durations[client.id]


@attrs.define
class Recorder:
    """An aggregator that records (client, staleness) of what it is given and keeps the model."""

    seen: list = attrs.field(factory=list)

    @fedcore.hookimpl
    def fedcore_aggregate(self, model, updates, ctx):
        self.seen.append([(u.client_id, u.staleness) for u in updates])
        return AggregateResult(state={})


def scripted(schedule, durations=SCRIPT, rounds=3):
    rec = Recorder()
    result = run_tiny_pipeline([schedule, rec], rounds=rounds, fixture=ContractFixture(num_clients=6),
                               clock=ScriptedClock(durations))
    return rec.seen, result.history


def test_semi_async_aggregates_mu_n_arrivals_plus_t_clk_and_stragglers_arrive_stale():
    seen, history = scripted(SemiAsyncSchedule(arrivals=4, t_clk=0.5))
    # t=1.0: clients 0-3 arrive (4 = μN), T_clk until 1.5, nothing else: aggregate them
    # t=2.2: client 4 (sent in round 0, τ=1); t=2.5: 0-3 again -> timeout 3.0; client 5 is still running
    # t=4.0: 0-3 and client 5 (sent in round 0, τ=2); timeout 4.5; client 4's second job ends at 5.2
    assert seen == [[(0, 0), (1, 0), (2, 0), (3, 0)],
                    [(0, 0), (1, 0), (2, 0), (3, 0), (4, 1)],
                    [(0, 0), (1, 0), (2, 0), (3, 0), (5, 2)]]
    assert [r["virtual_time"] for r in history] == pytest.approx([1.5, 3.0, 4.5])
    assert seen == scripted(SemiAsyncSchedule(arrivals=4, t_clk=0.5))[0]  # deterministic


def test_ru_eq17_by_hand_and_from_the_engine():
    assert ru_eq17([[1.0, 1.0, 2.0], [2.0, 2.0]]) == pytest.approx((4 / 6 + 1) / 2)
    _, history = scripted(SemiAsyncSchedule(arrivals=4, t_clk=0.5))
    assert history[1]["ru"] == pytest.approx((4 * 1.0 + 2.2) / (5 * 2.2))
    assert run_ru(history) == pytest.approx(ru_eq17([[1.0] * 4, [1.0] * 4 + [2.2], [1.0] * 4 + [4.0]]))


def test_sync_rounds_with_equal_durations_have_ru_one():
    _, history = scripted(UniformSync(), durations=dict.fromkeys(range(6), 0.7))
    assert all(r["ru"] == pytest.approx(1.0) for r in history)
    assert run_ru(history) == pytest.approx(1.0)


def test_fedavg_under_the_scripted_timeline_sees_the_same_staleness():
    result = run_tiny_pipeline([SemiAsyncSchedule(arrivals=4, t_clk=0.5), FedAvg()], rounds=3,
                               fixture=ContractFixture(num_clients=6), clock=ScriptedClock(SCRIPT))
    assert [r.get("max_staleness", 0) for r in result.history] == [0, 1, 2]
