"""ε reported by fedcore equals the accounting library's own value for the same mechanism parameters."""
import math

import pytest

from fedcore.builtin import AsyncSchedule, BufferedSchedule, FedAvg, FedBuffStep, UniformSync
from fedcore.testing import run_tiny_pipeline
from fedcore_dp import DPFedAvg, Event, epsilon

EVENTS = [Event(q=0.3, z=1.1, count=5), Event(q=0.2, z=0.9, count=3), Event(q=0.3, z=1.1, count=2)]


def library_rdp(events, delta):
    import dp_accounting
    from dp_accounting import rdp

    acc = rdp.RdpAccountant()
    for e in events:
        acc.compose(dp_accounting.PoissonSampledDpEvent(e.q, dp_accounting.GaussianDpEvent(e.z)), e.count)
    return acc.get_epsilon(delta)


def test_rdp_and_pld_equal_dp_accounting():
    import dp_accounting
    from dp_accounting import pld

    assert epsilon(EVENTS, 1e-5, "rdp") == pytest.approx(library_rdp(EVENTS, 1e-5), rel=1e-12)
    acc = pld.PLDAccountant(value_discretization_interval=1e-3)
    for e in EVENTS:
        acc.compose(dp_accounting.PoissonSampledDpEvent(e.q, dp_accounting.GaussianDpEvent(e.z)), e.count)
    assert epsilon(EVENTS, 1e-5, "pld") == pytest.approx(acc.get_epsilon(1e-5), rel=1e-9)
    assert epsilon(EVENTS, 1e-5, "pld") < epsilon(EVENTS, 1e-5, "rdp")  # PLD is the tighter analysis


def test_opacus_accountants_equal_opacus():
    from opacus.accountants import PRVAccountant, RDPAccountant

    ours = epsilon(EVENTS, 1e-5, "opacus-rdp")
    acc = RDPAccountant()
    for e in EVENTS:
        for _ in range(e.count):
            acc.step(noise_multiplier=e.z, sample_rate=e.q)
    assert ours == pytest.approx(acc.get_epsilon(1e-5), rel=1e-9)
    prv = PRVAccountant()
    prv.history = [(1.1, 0.3, 7), (0.9, 0.2, 3)]
    assert epsilon(EVENTS, 1e-5, "opacus-prv") == pytest.approx(prv.get_epsilon(1e-5), rel=1e-6)


def test_no_noise_is_infinite_and_no_event_is_zero():
    assert epsilon([Event(q=0.5, z=0.0)], 1e-5) == math.inf
    assert epsilon([], 1e-5) == 0.0


@pytest.mark.parametrize("accountant", ["rdp", "pld"])
def test_a_run_reports_the_library_epsilon_at_the_realised_sampling_rate(accountant):
    # 6 clients, 2 sampled per round: q = 2/6 per aggregation, z = 0.8, 3 rounds
    dp = DPFedAvg(noise_multiplier=0.8, clip=0.5, accountant=accountant, delta=1e-4)
    result = run_tiny_pipeline([dp, UniformSync(fraction=2 / 6), FedAvg(weighting="uniform")], rounds=3,
                               num_clients=6)
    reported = result.history.column("dp_epsilon")
    for t, eps in enumerate(reported, start=1):
        assert eps == pytest.approx(epsilon([Event(q=2 / 6, z=0.8, count=t)], 1e-4, accountant), rel=1e-9)
    assert reported[-1] == pytest.approx(library_rdp([Event(q=2 / 6, z=0.8, count=3)], 1e-4), rel=1e-9) \
        if accountant == "rdp" else reported[0] < reported[1] < reported[2]


def test_async_schedules_are_charged_for_the_aggregations_they_made():
    # FedAsync aggregates every arrival: one client of three per aggregation, q = 1/3, three aggregations
    dp = DPFedAvg(noise_multiplier=1.2, clip=0.5)
    result = run_tiny_pipeline([dp, AsyncSchedule(), FedAvg(weighting="uniform")], rounds=3)
    assert [len(c) for c in result.history.column("clients")] == [1, 1, 1]
    assert result.history.last("dp_epsilon") == pytest.approx(library_rdp([Event(q=1 / 3, z=1.2, count=3)], 1e-5),
                                                               rel=1e-9)


def test_fedbuff_is_charged_per_buffer_and_a_client_twice_in_it_doubles_the_sensitivity():
    # FedBuff merges a buffer of 2 arrivals; without a clock the first client restarts and fills it alone, so each
    # aggregation holds one distinct client of three (q = 1/3) whose two clipped changes sum to 2C: the server's
    # noise is z * 2C, and the mechanism it is charged is still z = 1.5 (sensitivity 2C)
    dp = DPFedAvg(noise_multiplier=1.5, clip=0.5)
    result = run_tiny_pipeline([dp, BufferedSchedule(buffer_size=2), FedBuffStep()], rounds=3)
    clients = result.history.column("clients")
    assert all(len(c) == 2 and len(set(c)) == 1 for c in clients)
    assert result.history.column("agg_dp_noise_multiplier") == pytest.approx([1.5] * 3)
    assert result.history.last("dp_epsilon") == pytest.approx(library_rdp([Event(q=1 / 3, z=1.5, count=3)], 1e-5),
                                                               rel=1e-9)


def test_without_amplification_every_client_counts_every_round():
    dp = DPFedAvg(noise_multiplier=1.0, clip=0.5, amplification=False)
    result = run_tiny_pipeline([dp, UniformSync(fraction=1 / 3), FedAvg(weighting="uniform")], rounds=2)
    assert result.history.last("dp_epsilon") == pytest.approx(library_rdp([Event(q=1.0, z=1.0, count=2)], 1e-5))
