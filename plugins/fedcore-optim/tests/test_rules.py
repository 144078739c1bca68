"""Every update rule against a hand computation, and FedAdam/FedYogi/FedAdagrad/FedAvgM against Flower's numbers.

The problem: two clients, two parameters. The global model is ``x`` (one entry ``"w"`` of two numbers); client A
holds 1 sample, client B 3, so with ``weighting = "samples"`` Δ = ¼·Δ_A + ¾·Δ_B (Flower's weighted average).
"""
import math

import pytest
import torch
from torch import nn

from fedcore.errors import ConfigError
from fedcore.stash import Stash
from fedcore.types import ClientUpdate, ServerState
from fedcore_optim import FEDADAM_STATE, FedAdagrad, FedAdam, FedAvgM, FedYogi

X0 = [1.0, -2.0]
SAMPLES = (1, 3)


class Global(nn.Module):
    """The global model: one parameter ``w`` of two numbers (float64, so the checks are exact to 1e-12)."""

    def __init__(self, values):
        super().__init__()
        self.w = nn.Parameter(torch.tensor(values, dtype=torch.float64))


class Ctx:
    """The server side of a round context: what an aggregator reads (``ctx.server.stash``)."""

    def __init__(self, model):
        self.server = ServerState(model=model, stash=Stash())


def uploads(model, changes, staleness=(0, 0), bases=None):
    """Client A and B upload ``base + change``; ``base`` is the current model unless given."""
    current = model.state_dict()["w"]
    out = []
    for i, (change, n) in enumerate(zip(changes, SAMPLES)):
        base = current.clone() if bases is None else torch.tensor(bases[i], dtype=torch.float64)
        out.append(ClientUpdate(client_id=i, num_examples=n, staleness=staleness[i], base={"w": base},
                                tensors={"w": base + torch.tensor(change, dtype=torch.float64)}))
    return out


def step(component, model, ctx, changes, **kw):
    """One aggregation; the global model takes the result (as the engine does). Returns the new ``w``."""
    result = component.fedcore_aggregate(model=model, updates=uploads(model, changes, **kw), ctx=ctx)
    model.load_state_dict(result.state, strict=False)
    return model.w.detach().clone()


def close(t, values, tol=1e-12):
    return torch.allclose(t, torch.tensor(values, dtype=torch.float64), atol=tol, rtol=0)


# Round 1 of the hand computations: Δ_A = (0.5, 0), Δ_B = (−0.5, 1) -> Δ = ¼Δ_A + ¾Δ_B = (−0.25, 0.75).
CHANGES_1 = ([0.5, 0.0], [-0.5, 1.0])
DELTA_1 = [-0.25, 0.75]


def test_fedavgm_hand_computation():
    # Hsu et al. (2019): m_t = β m_{t-1} + Δ_t ; x_{t+1} = x_t + η m_t, with m_{-1} = 0. β = 0.9, η = 0.5.
    model, opt = Global(X0), FedAvgM(server_lr=0.5, momentum=0.9)
    ctx = Ctx(model)
    m1 = DELTA_1                                                  # (−0.25, 0.75)
    x1 = [X0[0] + 0.5 * m1[0], X0[1] + 0.5 * m1[1]]              # (0.875, −1.625)
    assert close(step(opt, model, ctx, CHANGES_1), x1)
    # round 2: Δ_A = (0.2, −0.4), Δ_B = (0.1, 0.3) -> Δ = (0.125, 0.125); m2 = 0.9 m1 + Δ = (−0.1, 0.8)
    m2 = [0.9 * m1[0] + 0.125, 0.9 * m1[1] + 0.125]
    x2 = [x1[0] + 0.5 * m2[0], x1[1] + 0.5 * m2[1]]              # (0.825, −1.225)
    assert close(step(opt, model, ctx, ([0.2, -0.4], [0.1, 0.3])), x2)


def test_fedavgm_without_momentum_at_unit_rate_is_fedavg():
    model, ctx = Global(X0), None
    ctx = Ctx(model)
    # FedAvg: ¼ (x + Δ_A) + ¾ (x + Δ_B) = x + Δ
    assert close(step(FedAvgM(server_lr=1.0, momentum=0.0), model, ctx, CHANGES_1), [0.75, -1.25])


def test_fedadam_hand_computation():
    # Reddi et al. (2021), Alg. 2: m_t = β1 m_{t-1} + (1−β1) Δ_t ; v_t = β2 v_{t-1} + (1−β2) Δ_t² ;
    # x_{t+1} = x_t + η m_t / (√v_t + τ), with m_{-1} = 0, v_{-1} = τ². β1 = 0.9, β2 = 0.99, η = 0.1, τ = 0.01.
    model = Global(X0)
    ctx = Ctx(model)
    opt = FedAdam(server_lr=0.1, beta_1=0.9, beta_2=0.99, tau=0.01)
    tau = 0.01
    m = [0.1 * d for d in DELTA_1]                                         # (−0.025, 0.075)
    v = [0.99 * tau**2 + 0.01 * d**2 for d in DELTA_1]                     # (0.000724, 0.005724)
    x1 = [x + 0.1 * mi / (math.sqrt(vi) + tau) for x, mi, vi in zip(X0, m, v)]
    assert close(step(opt, model, ctx, CHANGES_1), x1)
    state = ctx.server.stash[FEDADAM_STATE]
    assert state["step"] == 1 and close(state["m"]["w"], m) and close(state["v"]["w"], v)


def test_fedadam_bias_correction_options():
    # adam: η_t = η √(1−β2^t)/(1−β1^t) at step t = 1: η √0.01 / 0.1 = η ; flower uses t + 1 = 2:
    # η √(1−0.99²)/(1−0.9²) = η √0.0199 / 0.19.
    tau = 0.01
    m = [0.1 * d for d in DELTA_1]
    v = [0.99 * tau**2 + 0.01 * d**2 for d in DELTA_1]
    for mode, factor in (("none", 1.0), ("adam", math.sqrt(0.01) / 0.1), ("flower", math.sqrt(1 - 0.99**2) / 0.19)):
        model = Global(X0)
        got = step(FedAdam(server_lr=0.1, tau=tau, bias_correction=mode), model, Ctx(model), CHANGES_1)
        assert close(got, [x + 0.1 * factor * mi / (math.sqrt(vi) + tau) for x, mi, vi in zip(X0, m, v)]), mode


def test_fedyogi_hand_computation():
    # Alg. 2: v_t = v_{t-1} − (1−β2) Δ_t² sign(v_{t-1} − Δ_t²). With v_{-1} = τ² = 1e-4 < Δ² on both
    # coordinates, sign = −1: v_0 = τ² + 0.01 Δ². η = 0.1, τ = 0.01.
    model = Global(X0)
    opt = FedYogi(server_lr=0.1, beta_1=0.9, beta_2=0.99, tau=0.01)
    tau = 0.01
    m = [0.1 * d for d in DELTA_1]
    v = [tau**2 + 0.01 * d**2 for d in DELTA_1]
    x1 = [x + 0.1 * mi / (math.sqrt(vi) + tau) for x, mi, vi in zip(X0, m, v)]
    ctx = Ctx(model)
    assert close(step(opt, model, ctx, CHANGES_1), x1)
    # round 2 with Δ = (0, 0): m decays, v − 0.01·0·sign(v) = v (unchanged)
    m2 = [0.9 * mi for mi in m]
    x2 = [x + 0.1 * mi / (math.sqrt(vi) + tau) for x, mi, vi in zip(x1, m2, v)]
    assert close(step(opt, model, ctx, ([0.0, 0.0], [0.0, 0.0])), x2)


def test_fedyogi_second_moment_shrinks_when_above_the_square():
    # v_{-1} = 1 > Δ² : sign(+) -> v_0 = 1 − 0.01 Δ²  (Yogi's additive, sign-controlled update; Adam would shrink by β2)
    model = Global(X0)
    opt = FedYogi(server_lr=0.1, tau=0.01, initial_v=1.0)
    v = [1.0 - 0.01 * d**2 for d in DELTA_1]
    m = [0.1 * d for d in DELTA_1]
    assert close(step(opt, model, Ctx(model), CHANGES_1),
                 [x + 0.1 * mi / (math.sqrt(vi) + 0.01) for x, mi, vi in zip(X0, m, v)])


def test_fedadagrad_hand_computation():
    # Alg. 2: v_t = v_{t-1} + Δ_t² ; with β1 = 0 (the default), m_t = Δ_t. η = 0.1, τ = 0.01, v_{-1} = τ².
    model = Global(X0)
    opt = FedAdagrad(server_lr=0.1, tau=0.01)
    v = [1e-4 + d**2 for d in DELTA_1]
    x1 = [x + 0.1 * d / (math.sqrt(vi) + 0.01) for x, d, vi in zip(X0, DELTA_1, v)]
    ctx = Ctx(model)
    assert close(step(opt, model, ctx, CHANGES_1), x1)
    # round 2, Δ = (0.125, 0.125): v accumulates
    v2 = [vi + 0.125**2 for vi in v]
    x2 = [x + 0.1 * 0.125 / (math.sqrt(vi) + 0.01) for x, vi in zip(x1, v2)]
    assert close(step(opt, model, ctx, ([0.2, -0.4], [0.1, 0.3])), x2)


# Three rounds against Flower. The expected values are what Flower's strategy arithmetic gives on these inputs:
# framework/py/flwr/server/strategy/fedadam.py (bias-corrected eta_norm with server_round + 1, m and v from zeros,
# tau added to sqrt(v)), fedyogi.py, fedadagrad.py (beta_1 fixed at 0), fedavgm.py (pseudo-gradient = x − fedavg,
# momentum_vector = pseudo-gradient in round 1), in adap/flower; each round's uploads are the strategy's current
# weights plus the clients' changes below, with num_examples 1 and 3; eta = 0.1 (FedAvgM: server_learning_rate 0.5,
# server_momentum 0.9), beta_1 = 0.9, beta_2 = 0.99, tau = 0.01.
ROUNDS = [([0.5, 0.0], [-0.5, 1.0]), ([0.2, -0.4], [0.1, 0.3]), ([-0.3, 0.1], [0.0, -0.2])]
FLOWER = {
    "fedadam": [[0.9469671579711808, -1.934488842199694], [0.9301606053469347, -1.8750993991390885],
                [0.9055485403429184, -1.8353099496675316]],
    "fedyogi": [[0.9285714285714286, -1.911764705882353], [0.9022215574246435, -1.8187787867571918],
                [0.859848232375139, -1.750431327832855]],
    "fedadagrad": [[0.9038461538461539, -1.9013157894736843], [0.947022779476957, -1.8850893002152769],
                   [0.9219723381228246, -1.901103613160007]],
    "fedavgm": [[0.875, -1.625], [0.825, -1.225], [0.7424999999999999, -0.9275]],
}
AS_FLOWER = {  # Flower starts v at 0 (initial_v=0) and bias-corrects FedAdam with step + 1
    "fedadam": FedAdam(server_lr=0.1, beta_1=0.9, beta_2=0.99, tau=0.01, initial_v=0.0, bias_correction="flower"),
    "fedyogi": FedYogi(server_lr=0.1, beta_1=0.9, beta_2=0.99, tau=0.01, initial_v=0.0),
    "fedadagrad": FedAdagrad(server_lr=0.1, beta_1=0.0, tau=0.01, initial_v=0.0),
    "fedavgm": FedAvgM(server_lr=0.5, momentum=0.9),
}


@pytest.mark.parametrize("name", sorted(FLOWER))
def test_three_rounds_equal_flowers_arithmetic(name):
    model = Global(X0)
    ctx = Ctx(model)
    for changes, expected in zip(ROUNDS, FLOWER[name]):
        assert close(step(AS_FLOWER[name], model, ctx, changes), expected, tol=1e-12), name


def test_paper_start_differs_from_flowers_zero_start():
    # v_{-1} = τ² (the default) instead of Flower's 0: the same inputs give a different first step (guards the
    # default: a regression to 0 would still pass the Flower test above, which sets initial_v explicitly)
    model = Global(X0)
    got = step(FedYogi(server_lr=0.1, tau=0.01), model, Ctx(model), ROUNDS[0])
    assert not close(got, FLOWER["fedyogi"][0], tol=1e-6)


def test_asynchronous_change_uses_each_clients_own_base_and_discounts_staleness():
    # FedBuff's direction: Δ = Σ w_i s(τ_i) (x_i − base_i), s(τ) = 1/√(1+τ). A started from (0, 0) one version ago
    # (τ = 1), B from the current model (τ = 0). FedAvgM(η = 1, β = 0) then moves the current model by Δ.
    model = Global(X0)
    ups = uploads(model, CHANGES_1, staleness=(1, 0), bases=[[0.0, 0.0], X0])
    result = FedAvgM(server_lr=1.0, momentum=0.0).fedcore_aggregate(model=model, updates=ups, ctx=Ctx(model))
    s_a = 1 / math.sqrt(2)
    delta = [0.25 * s_a * 0.5 + 0.75 * -0.5, 0.25 * s_a * 0.0 + 0.75 * 1.0]
    assert close(result.state["w"], [X0[0] + delta[0], X0[1] + delta[1]])
    assert result.metrics["staleness_weight"] == pytest.approx((s_a + 1) / 2)


def test_uniform_weighting_is_reddis_mean():
    model = Global(X0)
    result = FedAvgM(server_lr=1.0, momentum=0.0, weighting="uniform").fedcore_aggregate(
        model=model, updates=uploads(model, CHANGES_1), ctx=Ctx(model))
    assert close(result.state["w"], [X0[0] + 0.0, X0[1] + 0.5])     # Δ = ½(0.5, 0) + ½(−0.5, 1)


def test_buffers_take_the_convex_mean_and_counters_the_heaviest_value():
    model = nn.Sequential(nn.Linear(2, 2), nn.BatchNorm1d(2)).double()
    state = model.state_dict()
    ups = []
    for i, (n, var) in enumerate(((1, 4.0), (3, 0.5))):
        tensors = {k: v.clone() + 0.3 for k, v in state.items() if v.is_floating_point()}
        tensors["1.running_var"] = torch.full((2,), var, dtype=torch.float64)
        tensors["1.num_batches_tracked"] = torch.tensor(10 * (i + 1))
        ups.append(ClientUpdate(client_id=i, num_examples=n, tensors=tensors,
                                base={k: v.clone() for k, v in state.items()}))
    out = FedAdam().fedcore_aggregate(model=model, updates=ups, ctx=Ctx(model)).state
    assert torch.allclose(out["1.running_var"], torch.full((2,), 0.25 * 4.0 + 0.75 * 0.5, dtype=torch.float64))
    assert int(out["1.num_batches_tracked"]) == 20
    # parameters are stepped, not averaged: the first Adam step moves every coordinate by η·(1−β1)/√(1−β2) = η
    assert torch.allclose(out["0.weight"], state["0.weight"] + 0.1, atol=1e-6)


def test_uploads_that_are_not_whole_model_changes_are_refused_in_one_line():
    model = Global(X0)
    sliced = [ClientUpdate(client_id=3, num_examples=1, tensors={"w": torch.zeros(1, dtype=torch.float64)},
                           base={"w": torch.zeros(1, dtype=torch.float64)})]
    with pytest.raises(ConfigError, match=r"client 3 uploads 'w' with shape \(1,\), the global model's is \(2,\)"):
        FedAdam().fedcore_aggregate(model=model, updates=sliced, ctx=Ctx(model))
    features = [ClientUpdate(client_id=1, num_examples=1, tensors={"features": torch.zeros(4)}, base={})]
    with pytest.raises(ConfigError, match=r"client 1 uploads 'features', which the global model has not"):
        FedAvgM().fedcore_aggregate(model=model, updates=features, ctx=Ctx(model))


def test_bad_settings_name_the_field():
    with pytest.raises(ConfigError, match=r"FedAdam.bias_correction='kingma'"):
        FedAdam(bias_correction="kingma")
    with pytest.raises(ConfigError, match=r"FedAvgM.momentum=1.0 is out of range"):
        FedAvgM(momentum=1.0)
    with pytest.raises(ConfigError, match=r"FedYogi.tau=0.0 is out of range"):
        FedYogi(tau=0.0)
