"""FedRolex (rolling) and HeteroFL (prefix) index rules, and Co-S2P's rolling depth window."""
from collections import Counter

import pytest

from fedcore.errors import ConfigError
from fedcore_pruning import (
    count_parameters,
    extract,
    fedrolex_spec,
    heterofl_spec,
    kept_count,
    prefix_indices,
    rolling_indices,
    rolling_window_start,
)


def test_rolling_indices_wrap_and_cover_every_unit_equally():
    assert rolling_indices(8, 3, 0) == (0, 1, 2)
    assert rolling_indices(8, 3, 7) == (0, 1, 7)
    counts = Counter(i for r in range(8) for i in rolling_indices(8, 3, r))
    assert set(counts.values()) == {3} and len(counts) == 8


def test_prefix_indices_ignore_the_round():
    assert prefix_indices(8, 3) == prefix_indices(8, 3, round=5) == (0, 1, 2)


def test_kept_count_is_ceil_with_at_least_one():
    assert kept_count(64, 0.25) == 16 and kept_count(4, 0.75) == 3 and kept_count(4, 0.1) == 1
    assert kept_count(3, 0.5) == 2


def test_rolling_depth_window_slides_and_wraps():
    # L = 8, k = 6 (E1's AGX clients): starts 0, 1, 2, 0, 1, ...
    assert [rolling_window_start(8, 6, q) for q in range(1, 7)] == [0, 1, 2, 0, 1, 2]
    assert [rolling_window_start(16, 4, q, step=4) for q in range(1, 6)] == [0, 4, 8, 12, 3]
    assert rolling_window_start(8, 8, 5) == 0


def test_fedrolex_and_heterofl_specs(full, shape):
    rolex = fedrolex_spec(shape, 0.5, round=3)
    assert rolex.blocks[0].heads == (0, 3) and rolex.blocks[2].hidden == tuple(range(3, 35))
    assert rolex.head and rolex.kept_depth == shape.depth
    hetero = heterofl_spec(shape, 0.5)
    assert hetero.blocks[1].heads == (0, 1) and hetero.blocks[1].hidden == tuple(range(32))
    assert count_parameters(extract(full, rolex)).total == count_parameters(extract(full, hetero)).total
    assert count_parameters(extract(full, rolex)).total < count_parameters(full).total


@pytest.mark.parametrize("width", [0.0, -0.5, 1.5, "half"])
def test_widths_outside_the_unit_interval_are_refused(shape, width):
    with pytest.raises(ConfigError, match=r"width=.* must be a number in \(0, 1\]"):
        fedrolex_spec(shape, width, round=0)


def test_bad_windows_and_keeps_are_refused():
    with pytest.raises(ConfigError, match="window length=9 must be in"):
        rolling_window_start(8, 9, 1)
    with pytest.raises(ConfigError, match="1-based"):
        rolling_window_start(8, 2, 0)
    with pytest.raises(ConfigError, match="keep=0"):
        rolling_indices(8, 0, 1)
