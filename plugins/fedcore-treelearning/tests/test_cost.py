"""Eq. 3.1-3.4 by hand, and the bad inputs of the cost model."""
from __future__ import annotations

import pytest

from fedcore.errors import ConfigError
from fedcore.runtime import ResourceError
from fedcore_treelearning import SplitProblem, tree_time


def golden() -> SplitProblem:
    # 5 layers, 3 clients. Q^k FLOPs, F^k bytes, V_i FLOP/s, B_i bytes/s, V_s = 2 FLOP/s.
    return SplitProblem(unit_flops=(2, 4, 6, 8, 10), feature_bytes=(8, 4, 2, 1, 1),
                        client_speeds=(1, 2, 4), client_bandwidths=(4, 2, 1), server_speed=2)


def test_client_arrival_is_the_eq_3_3_term():
    p = golden()
    assert p.arrival(0, 2) == 2 / 1 + 8 / 4          # Q^1/V_0 + F^1/B_0 = 4      (Eq. 3.4 term)
    assert p.arrival(1, 3) == (2 + 4) / 2 + 4 / 2    # (Q^1+Q^2)/V_1 + F^2/B_1 = 5 (Eq. 3.3 term)
    assert p.arrival(2, 5) == (2 + 4 + 6 + 8) / 4 + 1 / 1  # = 6


def test_tree_time_golden_three_clients():
    # splits (2, 3, 5): arrivals 4, 5, 6.
    # Eq. 3.4: T^2 = t^2 = 4
    # Eq. 3.2: T^3 = max(t^3=5, T^2 + Q^2/V_s = 4+2) = 6
    #          T^4 = max(no client,  T^3 + Q^3/V_s = 6+3) = 9
    #          T^5 = max(t^5=6,      T^4 + Q^4/V_s = 9+4) = 13
    # Eq. 3.1: last = L = 5: T = T^5 + Q^5/V_s = 13 + 5 = 18
    assert tree_time(golden(), (2, 3, 5)) == 18.0


def test_tree_time_golden_meeting_point_waits_for_a_late_client():
    # splits (3, 3, 5): arrivals client0 = 6/1 + 4/4 = 7, client1 = 5, client2 = 6.
    # T^3 = t^3 = max(7, 5) = 7; T^4 = 7 + 3 = 10; T^5 = max(6, 10 + 4) = 14; T = 14 + 5 = 19
    assert tree_time(golden(), (3, 3, 5)) == 19.0
    # a slow link on client 2 (B = 1/20) makes it the critical path: a_2 = 5 + 20 = 25, T^5 = 25, T = 30
    slow = SplitProblem(unit_flops=(2, 4, 6, 8, 10), feature_bytes=(8, 4, 2, 1, 1), client_speeds=(1, 2, 4),
                        client_bandwidths=(4, 2, 0.05), server_speed=2)
    assert tree_time(slow, (3, 3, 5)) == 30.0


def test_tree_time_golden_one_client():
    # N = 3, Q = 3 each, F = (6, 3, 1), V = 1, B = 3, V_s = 3.
    p = SplitProblem(unit_flops=(3, 3, 3), feature_bytes=(6, 3, 1), client_speeds=(1,), client_bandwidths=(3,),
                     server_speed=3)
    assert tree_time(p, (2,)) == 3 / 1 + 6 / 3 + (3 + 3) / 3   # = 7
    assert tree_time(p, (3,)) == 6 / 1 + 3 / 3 + 3 / 3         # = 8


def test_strict_thesis_recursion_differs_only_when_no_client_splits_at_layer_2():
    p = SplitProblem(unit_flops=(1, 4, 1), feature_bytes=(1, 1, 1), client_speeds=(1,), client_bandwidths=(1,),
                     server_speed=0.5)
    # s = 3: a = (1+4)/1 + 1/1 = 6. Default: T^3 = 6, T = 6 + 1/0.5 = 8.
    # Strict (Eq. 3.4 with x = 0): T^2 = 0, T^3 = max(6, 0 + 4/0.5) = 8, T = 8 + 2 = 10.
    assert tree_time(p, (3,)) == 8.0
    assert tree_time(p, (3,), strict_thesis_recursion=True) == 10.0
    # s = 2: a = 1 + 1 = 2, T = 2 + (4 + 1)/0.5 = 12 either way
    assert tree_time(p, (2,)) == tree_time(p, (2,), strict_thesis_recursion=True) == 12.0


def test_stream_scaled_server_cost_counts_merged_clients():
    # splits (2, 3, 5): merged clients n_2 = 1, n_3 = 2, n_4 = 2, n_5 = 3.
    # T^2 = 4; T^3 = max(5, 4 + 1*2) = 6; T^4 = 6 + 2*3 = 12; T^5 = max(6, 12 + 2*4) = 20; T = 20 + 3*5 = 35
    assert tree_time(golden(), (2, 3, 5), stream_scaled=True) == 35.0


def test_a_subset_of_clients_bounds_the_full_time_from_below():
    p = golden()
    full = tree_time(p, (3, 2, 4))
    assert tree_time(p, (3, 2), clients=(0, 1)) <= full
    assert tree_time(p, (4,), clients=(2,)) <= full


@pytest.mark.parametrize("splits", [(1, 3, 5), (2, 3, 6), (2, 3, 0)])
def test_split_outside_the_model_is_one_clear_error(splits):
    with pytest.raises(ConfigError, match=r"outside the model.*2\.\.5"):
        tree_time(golden(), splits)


def test_split_beyond_a_clients_memory_is_a_resource_error():
    p = SplitProblem(unit_flops=(1, 1, 1), feature_bytes=(1, 1, 1), client_speeds=(1,), client_bandwidths=(1,),
                     server_speed=1, max_splits=(2,), client_names=("watch-0",))
    with pytest.raises(ResourceError, match="watch-0.*at most 2"):
        tree_time(p, (3,))


def test_one_split_per_client():
    with pytest.raises(ConfigError, match=r"2 split\(s\) given for 3 client"):
        tree_time(golden(), (2, 3))


@pytest.mark.parametrize("change, message", [
    ({"client_speeds": (1, 0, 4)}, r"client_speeds\[1\]=0"),
    ({"client_bandwidths": (4, 2)}, "client_bandwidths has 2 entries"),
    ({"feature_bytes": (1, 1)}, "feature_bytes has 2 entries"),
    ({"unit_flops": (1,), "feature_bytes": (1,)}, "at least 2"),
    ({"unit_flops": (1, -2, 1, 1, 1)}, r"unit_flops\[1\]=-2"),
    ({"server_speed": 0.0}, "server_speed"),
    ({"max_splits": (2, 6, 3)}, r"max_splits\[1\]=6"),
])
def test_bad_problem_is_one_clear_error(change, message):
    fields = {"unit_flops": (2, 4, 6, 8, 10), "feature_bytes": (8, 4, 2, 1, 1), "client_speeds": (1, 2, 4),
                  "client_bandwidths": (4, 2, 1), "server_speed": 2}
    with pytest.raises(ConfigError, match=message):
        SplitProblem(**{**fields, **change})


def test_numpy_inputs_are_plain_numbers():
    import numpy as np

    p = SplitProblem(unit_flops=np.array([2, 4, 6, 8, 10]), feature_bytes=np.array([8.0, 4, 2, 1, 1]),
                     client_speeds=np.array([1, 2, 4]), client_bandwidths=(4, 2, 1), server_speed=2)
    assert tree_time(p, np.array([2, 3, 5])) == 18.0  # the golden case above
    with pytest.raises(ConfigError, match="split True of client 0 is outside the model"):
        tree_time(p, (True, 3, 5))
