"""Each update rule against a hand computation on a two-client, two-parameter problem (issue 26 item 6).

The model is ``nn.Linear(1, 2, bias=False)``: two parameters ``w = (w₀, w₁)``, logits ``(w₀x, w₁x)``, cross-entropy,
so one sample's gradient is ``(softmax(w x) − e_y) · x``, written out below in plain floats (no autograd). Client 0
holds two copies of ``(x = 1, y = 0)``, client 1 one ``(x = 2, y = 1)``; with batch size 1 they take K₀ = 2 and
K₁ = 1 local steps (unequal, as FedNova needs; the copies make the shuffle order irrelevant). A small driver does
what the engine does (the global weights and ``share.aux`` down, the local update, ``update.base`` set, the
aggregate) for two rounds with both clients, so the second round runs with non-zero server state; the paper's
equations are then applied by hand and the weights (and the server state) compared.
"""
from __future__ import annotations

import math

import attrs
import pytest
import torch
from torch import nn

from fedcore.contexts import RoundContext, RunContext
from fedcore.data import ArrayDataset
from fedcore.types import ClientData, ClientInfo, ClientState, ServerState, Share
from fedcore_drift import (
    FedDynAggregate,
    FedDynUpdate,
    FedNovaAggregate,
    FedNovaUpdate,
    ScaffoldAggregate,
    ScaffoldUpdate,
    effective_steps,
)

W0 = (0.3, -0.2)
DATA = {0: [(1.0, 0), (1.0, 0)], 1: [(2.0, 1)]}
LR = 0.1
N = 3
"""Clients in the run: 0 and 1 take part every round, client 2 never (so |S| = 2 < N, as SCAFFOLD's c and FedDyn's h
divide by the clients in the run, not those sampled)."""


def grad(w: list[float], x: float, y: int) -> list[float]:
    """∇_w of cross-entropy for logits (w₀x, w₁x): (softmax − onehot(y)) · x."""
    z = [w[0] * x, w[1] * x]
    top = max(z)
    e = [math.exp(v - top) for v in z]
    p = [v / sum(e) for v in e]
    return [(p[j] - (1.0 if j == y else 0.0)) * x for j in range(2)]


def local_grad(w: list[float], client: int) -> list[float]:
    """g_i(w): the mean gradient over the client's samples (SCAFFOLD option I's c_i⁺ = g_i(x))."""
    gs = [grad(w, x, y) for x, y in DATA[client]]
    return [sum(g[j] for g in gs) / len(gs) for j in range(2)]


def run(local, aggregate, rounds: int = 2):
    """The engine's steps by hand: returns the final weights (list), the server aux, the client states."""
    torch.manual_seed(0)
    model = nn.Linear(1, 2, bias=False).double()
    with torch.no_grad():
        model.weight.copy_(torch.tensor([[W0[0]], [W0[1]]], dtype=torch.float64))
    xs = torch.tensor([[x] for c in (0, 1) for x, _ in DATA[c]], dtype=torch.float64)
    ys = torch.tensor([y for c in (0, 1) for _, y in DATA[c]])
    dataset = ArrayDataset(xs, ys)
    indices = {0: [0, 1], 1: [2]}
    run_ctx = RunContext(seed=0, num_clients=N, rounds=rounds, train=dataset, server=ServerState(model=model))
    aggregate.fedcore_run_start(run=run_ctx)
    states = {c: ClientState(client_id=c) for c in (0, 1)}
    for r in range(rounds):
        ctx = RoundContext(round=r, seed=0, run=run_ctx)
        updates = []
        for c in (0, 1):
            module = nn.Linear(1, 2, bias=False).double()
            module.load_state_dict(model.state_dict())
            share = Share(module=module, download=("weight",), upload=("weight",),
                          aux=run_ctx.server.aux.download_for(c))
            base = {"weight": model.state_dict()["weight"].clone()}
            u = local.fedcore_local_update(client=ClientInfo(id=c, num_samples=len(indices[c])), share=share,
                                           data=ClientData(dataset=dataset, indices=indices[c]), state=states[c],
                                           ctx=ctx.for_client(c, None))
            updates.append(attrs.evolve(u, client_id=c, base=base))
        out = aggregate.fedcore_aggregate(model=model, updates=updates, ctx=ctx)
        model.load_state_dict({**model.state_dict(), **out.state})
    return model.weight.detach().reshape(-1).tolist(), run_ctx.server.aux, states


def sgd(w: list[float], client: int, correction: list[float]) -> list[float]:
    """K_i steps of y ← y − η (g(y) + correction), one sample per step."""
    y = list(w)
    for x, label in DATA[client]:
        g = grad(y, x, label)
        y = [y[j] - LR * (g[j] + correction[j]) for j in range(2)]
    return y


@pytest.mark.parametrize("option", ["I", "II"])
def test_scaffold_follows_algorithm_1(option):
    """Karimireddy et al. 2020, Alg. 1: line 10 ``y ← y − η_l(g_i(y) − c_i + c)``; line 12 ``c_i⁺ = g_i(x)`` (I) or
    ``c_i − c + (x − y_i)/(K η_l)`` (II); line 13 ``Δc_i = c_i⁺ − c_i``; lines 16-17 ``x ← x + η_g mean Δy_i``,
    ``c ← c + (1/N) Σ Δc_i`` (|S| = 2, N = 3)."""
    eta_g = 0.7
    got, aux, states = run(ScaffoldUpdate(option=option, lr=LR, batch_size=1), ScaffoldAggregate(server_lr=eta_g))
    x, c, ci = list(W0), [0.0, 0.0], {0: [0.0, 0.0], 1: [0.0, 0.0]}
    for _ in range(2):
        dy, dc = {}, {}
        for i in (0, 1):
            y = sgd(x, i, [c[j] - ci[i][j] for j in range(2)])
            k = len(DATA[i])
            new = local_grad(x, i) if option == "I" else [ci[i][j] - c[j] + (x[j] - y[j]) / (k * LR) for j in range(2)]
            dy[i] = [y[j] - x[j] for j in range(2)]
            dc[i] = [new[j] - ci[i][j] for j in range(2)]
            ci[i] = new
        x = [x[j] + eta_g * (dy[0][j] + dy[1][j]) / 2 for j in range(2)]
        c = [c[j] + (dc[0][j] + dc[1][j]) / N for j in range(2)]
    assert got == pytest.approx(x, abs=1e-12)
    assert aux.get("scaffold.c.weight").reshape(-1).tolist() == pytest.approx(c, abs=1e-12)
    for i in (0, 1):
        assert states[i].tensors["scaffold.c.weight"].reshape(-1).tolist() == pytest.approx(ci[i], abs=1e-12)


@pytest.mark.parametrize("momentum", [0.0, 0.5])
def test_fednova_normalises_by_the_local_steps(momentum):
    """Wang et al. 2020: ``x ← x − τ_eff η Σ p_i d_i`` with ``d_i = (x − y_i)/(η ‖a_i‖₁)``,
    ``τ_eff = Σ p_i ‖a_i‖₁``, ``p_i = n_i/n``; ``‖a_i‖₁ = τ_i`` for SGD and
    ``[τ_i − ρ(1 − ρ^τ_i)/(1 − ρ)]/(1 − ρ)`` with momentum ρ (the sum of ``a_{i,k} = (1 − ρ^{τ−k})/(1 − ρ)``)."""
    got, _, _ = run(FedNovaUpdate(lr=LR, batch_size=1, momentum=momentum), FedNovaAggregate())
    x = list(W0)
    p = {0: 2 / 3, 1: 1 / 3}
    for _ in range(2):
        d, a = {}, {}
        for i in (0, 1):
            y, buf = list(x), [0.0, 0.0]  # torch's SGD momentum: buf ← ρ buf + g; y ← y − η buf
            for xs, label in DATA[i]:
                g = grad(y, xs, label)
                buf = [momentum * buf[j] + g[j] for j in range(2)]
                y = [y[j] - LR * buf[j] for j in range(2)]
            tau = len(DATA[i])
            a[i] = sum((1 - momentum ** (tau - k)) / (1 - momentum) for k in range(tau))
            d[i] = [(x[j] - y[j]) / (LR * a[i]) for j in range(2)]
        tau_eff = p[0] * a[0] + p[1] * a[1]
        x = [x[j] - tau_eff * LR * (p[0] * d[0][j] + p[1] * d[1][j]) for j in range(2)]
    assert got == pytest.approx(x, abs=1e-12)
    assert effective_steps(2, momentum) == pytest.approx(a[0], abs=1e-15)


def test_feddyn_follows_algorithm_1():
    """Acar et al. 2021, Alg. 1: client ``θ_k = argmin L_k(θ) − <∇L_k(θ_k^{t−1}), θ> + (α/2)‖θ − θ^{t−1}‖²`` (here K_k
    SGD steps on it), ``∇L_k(θ_k^t) = ∇L_k(θ_k^{t−1}) − α(θ_k^t − θ^{t−1})``; server ``h ← h − α(1/m)Σ(θ_k − θ^{t−1})``,
    ``θ^t = (1/|P|) Σ θ_k − h/α`` (|P| = 2, m = 3)."""
    alpha = 0.5
    got, aux, states = run(FedDynUpdate(alpha=alpha, lr=LR, batch_size=1), FedDynAggregate(alpha=alpha))
    theta, h, gk = list(W0), [0.0, 0.0], {0: [0.0, 0.0], 1: [0.0, 0.0]}
    for _ in range(2):
        thetas = {}
        for k in (0, 1):
            y = list(theta)
            for x, label in DATA[k]:
                g = grad(y, x, label)
                y = [y[j] - LR * (g[j] - gk[k][j] + alpha * (y[j] - theta[j])) for j in range(2)]
            gk[k] = [gk[k][j] - alpha * (y[j] - theta[j]) for j in range(2)]
            thetas[k] = y
        h = [h[j] - alpha * ((thetas[0][j] - theta[j]) + (thetas[1][j] - theta[j])) / N for j in range(2)]
        theta = [(thetas[0][j] + thetas[1][j]) / 2 - h[j] / alpha for j in range(2)]
    assert got == pytest.approx(theta, abs=1e-12)
    assert aux.get("feddyn.h.weight").reshape(-1).tolist() == pytest.approx(h, abs=1e-12)
    for k in (0, 1):
        assert states[k].tensors["feddyn.grad.weight"].reshape(-1).tolist() == pytest.approx(gk[k], abs=1e-12)
