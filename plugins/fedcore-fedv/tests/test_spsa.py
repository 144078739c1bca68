"""The SPSA estimator on its own: unbiased on a quadratic, seed replay, bad settings."""
from __future__ import annotations

import pytest
import torch

from fedcore import ConfigError
from fedcore_fedv.spsa import SPSA


def quadratic(d=6, m=9, seed=0):
    g = torch.Generator().manual_seed(seed)
    A, b = torch.randn(m, d, generator=g, dtype=torch.float64), torch.randn(m, generator=g, dtype=torch.float64)
    w = {"w": torch.randn(d, generator=g, dtype=torch.float64)}

    def f(p):
        r = A @ p["w"] - b
        return float(0.5 * r @ r)

    return f, w, A.T @ (A @ w["w"] - b)


@pytest.mark.parametrize("distribution", ["gaussian", "rademacher"])
def test_unbiased_on_a_quadratic(distribution):
    f, w, true = quadratic()
    est = SPSA(eps=1e-3, distribution=distribution)
    mean = sum(est.estimate(f, w, seed)["w"] for seed in range(2000)) / 2000
    cos = float(mean @ true / (mean.norm() * true.norm()))
    assert cos > 0.97
    # standard error of the mean of 2000 samples is ~ sqrt(d) |g| / sqrt(2000) ~ 0.05 |g|
    assert float((mean - true).norm() / true.norm()) < 0.2


def test_single_estimate_is_exact_along_its_direction():
    f, w, true = quadratic()
    est = SPSA(eps=1e-4)
    z = est.direction(w, 7)["w"]
    g = est.estimate(f, w, 7)["w"]
    pg = float(g @ z / (z @ z))
    assert pg == pytest.approx(float(true @ z), rel=1e-6)  # central differences are exact on quadratics


def test_seed_replay_and_points():
    est = SPSA(eps=0.5, num_directions=3)
    params = {"a": torch.zeros(4), "b": torch.ones(2, 2)}
    assert all(torch.equal(est.direction(params, 3)[k], est.direction(params, 3)[k]) for k in params)
    plus, minus = est.points(params, 3)
    for k in params:
        assert torch.allclose((plus[k] + minus[k]) / 2, params[k])
    assert len(set(est.seeds(3))) == 3
    rebuilt = est.gradient(params, [11], [2.0])
    assert torch.allclose(rebuilt["a"], 2.0 * est.direction(params, 11)["a"])


def test_forward_estimator_and_more_directions_reduce_error():
    f, w, true = quadratic()
    err = []
    for n in (1, 16):
        est = SPSA(eps=1e-5, num_directions=n, estimator="forward")
        mean_err = sum(float((est.estimate(f, w, s)["w"] - true).norm()) for s in range(50)) / 50
        err.append(mean_err)
    assert err[1] < 0.5 * err[0]


@pytest.mark.parametrize(("kw", "match"), [
    ({"eps": 0.0}, "SPSA.eps=0.0 is out of range"),
    ({"eps": -1e-3}, "SPSA.eps"),
    ({"num_directions": 0}, "SPSA.num_directions=0 is out of range"),
    ({"distribution": "uniform"}, "SPSA.distribution"),
])
def test_bad_settings_name_the_setting(kw, match):
    with pytest.raises(ConfigError, match=match):
        SPSA(**kw)
