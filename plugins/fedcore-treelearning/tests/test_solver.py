"""Alg. 2 (branch and bound) against exhaustive search, warm starts, and the solver's bad inputs."""
from __future__ import annotations

import numpy as np
import pytest

from fedcore.errors import ConfigError
from fedcore_treelearning import SplitProblem, branch_and_bound, exhaustive, tree_time

CLIENT_COUNTS = (1, 2, 3, 4, 5, 6)
MAX_ASSIGNMENTS = 1500  # keeps the exhaustive reference fast


def random_problem(rng: np.random.Generator) -> SplitProblem:
    c = int(rng.choice(CLIENT_COUNTS))
    n = int(rng.integers(2, 9))
    while (n - 1) ** c > MAX_ASSIGNMENTS:
        n -= 1
    tiers = rng.random() < 0.3  # sometimes equal speeds (ties in the slowest-first order)
    speeds = rng.choice([0.5, 1.0, 2.0], size=c) if tiers else rng.uniform(0.2, 5.0, size=c)
    caps = [int(rng.integers(2, n + 1)) for _ in range(c)] if rng.random() < 0.3 else None
    return SplitProblem(unit_flops=rng.uniform(0.1, 10.0, size=n).tolist(),
                        feature_bytes=rng.uniform(0.1, 10.0, size=n).tolist(),
                        client_speeds=speeds.tolist(), client_bandwidths=rng.uniform(0.5, 20.0, size=c).tolist(),
                        server_speed=float(rng.uniform(1.0, 50.0)), max_splits=caps)


@pytest.mark.parametrize("chunk", range(4))
def test_branch_and_bound_equals_exhaustive_on_200_random_instances(chunk):
    rng = np.random.default_rng([2023, chunk])
    for case in range(50):
        p = random_problem(rng)
        flags = {"monotone": bool(rng.random() < 0.7), "strict_thesis_recursion": bool(rng.random() < 0.3),
                     "stream_scaled": bool(rng.random() < 0.3)}
        ref = exhaustive(p, **flags)
        got = branch_and_bound(p, **flags)
        assert got.time == ref.time, (chunk, case, flags, got, ref)
        assert tree_time(p, got.splits, strict_thesis_recursion=flags["strict_thesis_recursion"],
                         stream_scaled=flags["stream_scaled"]) == got.time
        assert all(2 <= s <= p.max_split(i) for i, s in enumerate(got.splits))
        if flags["monotone"]:  # a slower client never holds more layers than a faster one
            v = p.client_speeds
            assert all(got.splits[i] <= got.splits[j] for i in range(p.n_clients) for j in range(p.n_clients)
                       if v[i] < v[j])


def test_partial_times_bound_complete_times_from_below():
    rng = np.random.default_rng(7)
    for _ in range(100):
        p = random_problem(rng)
        splits = [int(rng.integers(2, p.max_split(i) + 1)) for i in range(p.n_clients)]
        full = tree_time(p, splits, stream_scaled=True)
        for size in range(p.n_clients):
            assert tree_time(p, splits[:size], clients=range(size), stream_scaled=True) <= full


def test_branch_and_bound_prunes():
    # 6 clients, 8 layers: 7^6 = 117,649 assignments, 1,716 monotone ones; the bound must cut most of them
    rng = np.random.default_rng(11)
    p = SplitProblem(unit_flops=rng.uniform(1, 10, 8).tolist(), feature_bytes=rng.uniform(1, 10, 8).tolist(),
                     client_speeds=[0.5, 0.5, 1.0, 1.0, 2.0, 4.0], client_bandwidths=[5.0] * 6, server_speed=20.0)
    solution = branch_and_bound(p)
    assert solution.time == exhaustive(p).time
    assert solution.evaluated < 1716 / 2


def test_split_per_client_by_hand():
    # Q = 4 per layer, F = (8, 1, 1, 1) bytes, B = 2 bytes/s, V_s = 4 FLOP/s (server: 1 s per layer).
    # Slow client (V = 0.5): s=2: 8 + 4 + 3 = 15; s=3: 16 + 0.5 + 2 = 18.5; s=4: 24 + 0.5 + 1 = 25.5 -> 2
    # Fast client (V = 8):   s=2: 0.5 + 4 + 3 = 7.5; s=3: 1 + 0.5 + 2 = 3.5; s=4: 1.5 + 0.5 + 1 = 3 -> 4
    def problem(*speeds):
        return SplitProblem(unit_flops=(4, 4, 4, 4), feature_bytes=(8, 1, 1, 1), client_speeds=speeds,
                            client_bandwidths=(2.0,) * len(speeds), server_speed=4.0)
    slow, fast = branch_and_bound(problem(0.5)), branch_and_bound(problem(8.0))
    assert (slow.splits, slow.time) == ((2,), 15.0)
    assert (fast.splits, fast.time) == ((4,), 3.0)
    # together the slow client is the critical path: the tree time is its 15 s (the fast client waits at no cost)
    both = branch_and_bound(problem(0.5, 8.0))
    assert both.time == 15.0 and both.splits[0] == 2


def test_warm_start_returns_the_same_optimum_with_no_more_work():
    rng = np.random.default_rng(3)
    for _ in range(20):
        p = random_problem(rng)
        cold = branch_and_bound(p)
        warm = branch_and_bound(p, init=cold.splits)
        assert warm.time == cold.time
        assert warm.evaluated <= cold.evaluated + 1


def test_relabelling_clients_permutes_the_solution():
    rng = np.random.default_rng(5)
    for _ in range(20):
        p = random_problem(rng)
        perm = rng.permutation(p.n_clients).tolist()
        q = SplitProblem(unit_flops=p.unit_flops, feature_bytes=p.feature_bytes, server_speed=p.server_speed,
                         client_speeds=[p.client_speeds[i] for i in perm],
                         client_bandwidths=[p.client_bandwidths[i] for i in perm],
                         max_splits=[p.max_split(i) for i in perm])
        a, b = branch_and_bound(p), branch_and_bound(q)
        assert a.time == b.time
        assert tree_time(p, [b.splits[perm.index(i)] for i in range(p.n_clients)]) == a.time


def test_init_outside_the_model_is_one_clear_error():
    p = SplitProblem(unit_flops=(1, 1, 1), feature_bytes=(1, 1, 1), client_speeds=(1, 2), client_bandwidths=(1, 1),
                     server_speed=1)
    with pytest.raises(ConfigError, match=r"split 4 of client 1 is outside the model.*2\.\.3"):
        branch_and_bound(p, init=(2, 4))
    with pytest.raises(ConfigError, match=r"init has 1 split\(s\); the problem has 2 clients"):
        branch_and_bound(p, init=(2,))
