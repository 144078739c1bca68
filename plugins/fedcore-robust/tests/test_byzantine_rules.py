"""Krum, Multi-Krum, Bulyan and centred clipping against hand computations, and their refusals.

The global model is one entry ``w`` of two numbers; client i uploads ``base + cᵢ`` for the changes ``cᵢ`` below,
so every distance is between the changes.
"""
import pytest
import torch
from torch import nn

import fedcore
from fedcore.builtin import AsyncSchedule, BufferedSchedule, FedAvg, SemiAsyncSchedule
from fedcore.errors import ConfigError
from fedcore.stash import Stash
from fedcore.testing import run_tiny_pipeline
from fedcore.types import ClientUpdate, ServerState
from fedcore_robust import (
    CENTRE,
    Bulyan,
    CentredClipping,
    Krum,
    MultiKrum,
    bulyan_selection,
    closest_to_median_mean,
    krum_scores,
)

X = [1.0, -2.0]


class Global(nn.Module):
    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.tensor(X, dtype=torch.float64))


class Ctx:
    def __init__(self, model):
        self.server = ServerState(model=model, stash=Stash())


def uploads(changes):
    base = torch.tensor(X, dtype=torch.float64)
    return [ClientUpdate(client_id=i, num_examples=100 if i == len(changes) - 1 else 1, base={"w": base.clone()},
                         tensors={"w": base + torch.tensor(c, dtype=torch.float64)}) for i, c in enumerate(changes)]


def aggregate(component, changes, model=None, ctx=None):
    model = model or Global()
    return component.fedcore_aggregate(model=model, updates=uploads(changes), ctx=ctx or Ctx(model)).state["w"]


def close(t, values):
    return torch.allclose(t, torch.tensor(values, dtype=torch.float64), atol=1e-12, rtol=0)


# n = 5, f = 1: each score sums the n − f − 2 = 2 smallest squared distances to the other changes.
KRUM = [[0, 0], [1, 0], [0, 2], [1, 1], [10, 10]]     # c4 is Byzantine (and claims 100 samples)
# squared distances: d01=1 d02=4 d03=2 d04=200 | d12=5 d13=1 d14=181 | d23=2 d24=164 | d34=162
# scores: c0 = 1+2 = 3, c1 = 1+1 = 2, c2 = 2+4 = 6, c3 = 1+2 = 3, c4 = 162+164 = 326


def test_krum_scores_by_hand():
    rows = torch.tensor(KRUM, dtype=torch.float64)
    assert krum_scores(rows, f=1).tolist() == [3.0, 2.0, 6.0, 3.0, 326.0]


def test_krum_takes_the_lowest_score():
    assert close(aggregate(Krum(f=1), KRUM), [X[0] + 1, X[1] + 0])          # c1


def test_multi_krum_means_the_m_best():
    # m = n − f = 4: c1 (2), c0 (3), c3 (3), c2 (6) -> mean of c0..c3 = (0.5, 0.75); unweighted (c4's 100 samples
    # buy nothing)
    assert close(aggregate(MultiKrum(f=1), KRUM), [X[0] + 0.5, X[1] + 0.75])
    # m = 2: c1, then the tie c0/c3 at 3 goes to the lower id -> mean of c1, c0 = (0.5, 0)
    assert close(aggregate(MultiKrum(f=1, m=2), KRUM), [X[0] + 0.5, X[1] + 0.0])


# n = 7, f = 1 (n ≥ 4f + 3 = 7): θ = n − 2f = 5 selected by Krum, β = θ − 2f = 3 averaged per coordinate.
BULYAN = [[i, i] for i in range(6)] + [[100, 100]]   # c6 is Byzantine; d(ci, cj) = 2 (i − j)²


def test_bulyan_selection_by_hand():
    # r = 7 left, 4 neighbours: scores c0 60, c1 30, c2 20, c3 20, c4 30, c5 60 -> c2 (tie with c3, lower id)
    # r = 6, 3 neighbours: c0 52, c1 28, c3 18, c4 22, c5 42 -> c3
    # r = 5, 2 neighbours: c0 34, c1 20, c4 20, c5 34 -> c1
    # r = 4, max(4 − 3, 1) = 1 neighbour: c0 32, c4 2, c5 2 -> c4
    # r = 3, 1 neighbour: c0 50, c5 50 -> c0
    rows = torch.tensor(BULYAN, dtype=torch.float64)
    assert bulyan_selection(rows, f=1) == [2, 3, 1, 4, 0]


def test_bulyan_closest_to_median_mean_by_hand():
    # θ = 5 values 0, 1, 5, 6, 100: median 5, distances 5, 4, 0, 1, 95 -> β = 3 nearest: 5, 6, 1 -> mean 4
    stack = torch.tensor([[0.0], [1.0], [5.0], [6.0], [100.0]], dtype=torch.float64)
    assert closest_to_median_mean(stack, 3).tolist() == [4.0]


def test_bulyan_end_to_end_by_hand():
    # selected c2, c3, c1, c4, c0: values 0..4 per coordinate, median 2, β = 3 nearest 2, 3, 1 -> mean 2
    assert close(aggregate(Bulyan(f=1), BULYAN), [X[0] + 2, X[1] + 2])


def test_centred_clipping_by_hand():
    # Karimireddy et al. (2021): v ← v + (1/n) Σ (Δᵢ − v) min(1, τ / ||Δᵢ − v||), v₀ = the previous aggregate (0 at
    # first). τ = 1: ||(3, 4)|| = 5 -> weight 0.2 -> (0.6, 0.8); (0.6, 0.8) and (0, 0.5) are inside the radius.
    model = Global()
    ctx = Ctx(model)
    cc = CentredClipping(tau=1.0)
    v1 = [(0.6 + 0.6 + 0.0) / 3, (0.8 + 0.8 + 0.5) / 3]                     # (0.4, 0.7)
    assert close(aggregate(cc, [[3, 4], [0.6, 0.8], [0, 0.5]], model, ctx), [X[0] + v1[0], X[1] + v1[1]])
    assert close(ctx.server.stash[CENTRE], v1)
    # the next aggregation starts from v₀ = (0.4, 0.7): (0.4, 0.7) is at distance 0, (10.4, 0.7) at 10 -> weight
    # 0.1 -> v = v₀ + ½ ((0, 0) + 0.1·(10, 0)) = (0.9, 0.7)
    assert close(aggregate(cc, [[0.4, 0.7], [10.4, 0.7]], model, ctx), [X[0] + 0.9, X[1] + 0.7])


def test_centred_clipping_two_iterations():
    # L = 2 from v₀ = 0, τ = 1, changes (4, 0) and (0, 0): v1 = ½ (1, 0) = (0.5, 0); then (4, 0) is 3.5 away
    # (weight 1/3.5) and (0, 0) 0.5 away: v2 = (0.5, 0) + ½ ((3.5/3.5, 0) + (−0.5, 0)) = (0.75, 0)
    assert close(aggregate(CentredClipping(tau=1.0, iterations=2), [[4, 0], [0, 0]]), [X[0] + 0.75, X[1]])


def test_too_few_updates_are_refused_in_one_line():
    with pytest.raises(ConfigError, match=r"krum with f=1 needs at least 5 updates per aggregation \(n > 2f \+ 2\); "
                                          r"this aggregation has 4"):
        aggregate(Krum(f=1), KRUM[:4])
    with pytest.raises(ConfigError, match=r"bulyan with f=1 needs at least 7 updates per aggregation \(n ≥ 4f \+ 3\)"):
        aggregate(Bulyan(f=1), BULYAN[:6])


def test_schedules_that_fix_too_few_updates_are_refused_when_the_pipeline_is_built():
    with pytest.raises(ConfigError, match=r"krum with f=1 needs at least 5 .* AsyncSchedule gives 1 \(it aggregates "
                                          r"every arrival alone\)"):
        fedcore.Pipeline([Krum(f=1), AsyncSchedule()])
    with pytest.raises(ConfigError, match=r"bulyan with f=1 needs at least 7 .* BufferedSchedule gives 5 "
                                          r"\(buffer_size=5\)"):
        fedcore.Pipeline([Bulyan(f=1), BufferedSchedule(buffer_size=5)])
    with pytest.raises(ConfigError, match=r"multi-krum with f=2 .* SemiAsyncSchedule gives 6 \(arrivals=6\)"):
        fedcore.Pipeline([MultiKrum(f=2), SemiAsyncSchedule(arrivals=6)])
    fedcore.Pipeline([Krum(f=1), BufferedSchedule(buffer_size=5)])            # enough: built
    fedcore.Pipeline([CentredClipping(), AsyncSchedule()])                     # no bound: built


def test_changes_that_are_not_comparable_vectors_are_refused():
    model = Global()
    sliced = [ClientUpdate(client_id=2, num_examples=1, tensors={"w": torch.zeros(1, dtype=torch.float64)},
                           base={"w": torch.zeros(1, dtype=torch.float64)})]
    with pytest.raises(ConfigError, match=r"client 2 uploads 'w' with shape \(1,\), the global model's is \(2,\) "
                                          r"\(a sliced submodel\?\)"):
        CentredClipping().fedcore_aggregate(model=model, updates=sliced, ctx=Ctx(model))
    features = [ClientUpdate(client_id=4, num_examples=1, tensors={"features": torch.zeros(3)})] * 3
    with pytest.raises(ConfigError, match=r"client 4 uploads 'features', which the global model has not"):
        Krum(f=0).fedcore_aggregate(model=model, updates=features, ctx=Ctx(model))


def _outlier_run(component, clients):
    """Client 0 uploads 1e4 in every coordinate (finite, so the engine accepts it)."""
    import attrs

    from fedcore.builtin import SGDUpdate

    @attrs.frozen(eq=False, kw_only=True)
    class Outlier:
        """Client 0 is Byzantine."""

        inner: SGDUpdate = SGDUpdate(lr=0.1)

        @fedcore.hookimpl
        def fedcore_local_update(self, client, share, data, state, ctx):
            update = self.inner.fedcore_local_update(client=client, share=share, data=data, state=state, ctx=ctx)
            if client.id == 0:
                return attrs.evolve(update, tensors={k: torch.full_like(v, 1e4) if v.is_floating_point() else v
                                                     for k, v in update.tensors.items()})
            return update

    return run_tiny_pipeline([Outlier(), component], rounds=2, num_clients=clients)


def test_one_outlier_client_does_not_move_the_new_rules():
    # (trimmed mean and median: tests/test_robust.py; Multi-Krum shares Krum's scores)
    fedavg = _outlier_run(FedAvg(), 7)
    assert max(float(p.detach().abs().max()) for p in fedavg.model.parameters()) > 100.0
    for component in (Krum(f=1), Bulyan(f=1), CentredClipping(tau=1.0)):
        result = _outlier_run(component, 7)
        assert max(float(p.detach().abs().max()) for p in result.model.parameters()) < 10.0, component
        assert result.history.last("test_accuracy") > 0.4, component       # 4 classes: chance is 0.25


def test_bad_settings_name_the_field():
    with pytest.raises(ConfigError, match=r"Krum.f=-1 is out of range"):
        Krum(f=-1)
    with pytest.raises(ConfigError, match=r"MultiKrum.m=0 is out of range"):
        MultiKrum(m=0)
    with pytest.raises(ConfigError, match=r"CentredClipping.tau=0.0 is out of range"):
        CentredClipping(tau=0.0)
