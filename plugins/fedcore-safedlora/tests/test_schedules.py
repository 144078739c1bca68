"""Schedule primitives: exact values at known rounds, the SA-FedLoRA rank schedule (Eqs. 11-14), bad input."""
import math

import pytest

from fedcore.errors import ConfigError
from fedcore_safedlora.schedules import Constant, Piecewise, Ramp, RankSchedule, area, integerise, shape_factor


def test_shape_factors_exact():
    assert shape_factor("linear", 0.25) == 0.75
    assert shape_factor("cubic", 0.5) == 0.125
    assert shape_factor("cosine", 0.5) == pytest.approx(0.5)
    assert shape_factor("cosine", 1.0) == pytest.approx(0.0)
    assert shape_factor("cosine", 1.0, n=2) == pytest.approx(0.5)  # n >= 2 does not reach the end value


def test_ramp_values_at_known_rounds():
    r = Ramp(start=12, end=8, t_start=2, t_end=6, shape="cubic")
    # 8 + 4 (1 - (t-2)/4)^3
    assert [r(t) for t in range(8)] == [12, 12, 12, 8 + 4 * 0.75 ** 3, 8.5, 8 + 4 * 0.25 ** 3, 8, 8]
    lin = Ramp(start=10, end=0, t_start=0, t_end=10, shape="linear")
    assert lin(3) == 7.0
    cos = Ramp(start=1.0, end=0.0, t_start=0, t_end=4, shape="cosine")
    assert cos(2) == pytest.approx(0.5) and cos(1) == pytest.approx(0.5 * (1 + math.cos(math.pi / 4)))


def test_piecewise_and_constant():
    warm = Piecewise(pieces=((3, Constant(value=0.1)),), rest=Ramp(start=1.0, end=0.0, t_start=0, t_end=4),
                     relative=True)
    assert [warm(t) for t in (0, 2, 3, 5, 7, 9)] == [0.1, 0.1, 1.0, 0.5, 0.0, 0.0]
    with pytest.raises(ConfigError):
        Piecewise(pieces=((5, Constant(value=1)), (2, Constant(value=2))), rest=Constant(value=0))


def test_rank_schedule_paper_example_cubic():
    s = RankSchedule(r_a=12, r_b=8, t_a=2, t_b=12, shape="cubic")
    # floor(8 + 4 (1 - (t-2)/10)^3): t=3 -> 8+2.916 -> 10; t=4 -> 8+2.048 -> 10; t=5 -> 9.372 -> 9; t=6 -> 8.864 -> 8
    assert s.values(16) == [12, 12, 12, 10, 10, 9, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8]
    assert [s.phase(t) for t in (0, 1, 2, 12, 13)] == ["heating", "heating", "decay", "decay", "cooling"]


def test_rank_schedule_boundaries_and_monotone():
    for shape in ("cubic", "linear", "cosine"):
        s = RankSchedule(r_a=6, r_b=4, t_a=2, t_b=10, shape=shape)
        v = s.values(20)
        assert v[0] == v[1] == 6 and v[2] == 6            # t < T_a and t = T_a give r_a
        assert v[10] == 4 and v[11:] == [4] * 9           # t = T_b and after give r_b
        assert all(a >= b for a, b in zip(v, v[1:]))      # non-increasing
        assert all(isinstance(x, int) and 4 <= x <= 6 for x in v)


def test_cubic_below_linear_and_cost_ordering():
    cubic = RankSchedule(r_a=12, r_b=8, t_a=2, t_b=12, shape="cubic")
    linear = RankSchedule(r_a=12, r_b=8, t_a=2, t_b=12, shape="linear")
    cosine = RankSchedule(r_a=12, r_b=8, t_a=2, t_b=12, shape="cosine")
    assert all(c <= lin for c, lin in zip(cubic.values(30), linear.values(30)))
    assert area(cubic, 30) < area(linear, 30)
    # linear and cosine(n=1) enclose the same area above r_b; integer floors differ by at most a few rank-rounds
    assert abs(area(linear.ramp, 30) - area(cosine.ramp, 30)) < 1e-9


def test_degenerate_step_and_fixed_rank():
    step = RankSchedule(r_a=6, r_b=3, t_a=4, t_b=4)
    assert step.values(7) == [6, 6, 6, 6, 3, 3, 3]
    fixed = RankSchedule(r_a=5, r_b=5, t_a=0, t_b=3)
    assert fixed.values(6) == [5] * 6


def test_rounding_modes():
    assert integerise(2.9999999999) == 3 and integerise(2.5) == 2
    assert integerise(2.5, "round") == 3 and integerise(2.1, "ceil") == 3
    s = RankSchedule(r_a=12, r_b=8, t_a=2, t_b=12, shape="cubic", rounding="ceil")
    assert s(3) == 11


def test_bad_schedules_name_the_setting():
    with pytest.raises(ConfigError, match="r_b=9 > r_a=8"):
        RankSchedule(r_a=8, r_b=9)
    with pytest.raises(ConfigError, match="t_a=5 > t_b=3"):
        RankSchedule(r_a=8, r_b=4, t_a=5, t_b=3)
    with pytest.raises(ConfigError, match="shape"):
        RankSchedule(r_a=8, r_b=4, shape="exp")
    with pytest.raises(ConfigError, match="Ramp.t_end"):
        Ramp(start=1, end=0, t_start=3, t_end=1)
    with pytest.raises(ValueError):
        RankSchedule(r_a=8, r_b=4)(-1)
