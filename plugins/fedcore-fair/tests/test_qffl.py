"""q-FedAvg against a hand computation of the paper's equations, its q = 0 limit, and the client's loss report.

The contract checks of ``qffl`` and ``qffl-loss`` run in fedcore's own suite (tests/test_registered_contracts.py).
"""
import math

import attrs
import pytest
import torch
from torch import nn

import fedcore
from fedcore.builtin import AsyncSchedule, FedAvg
from fedcore.data import batches
from fedcore.errors import ConfigError
from fedcore.testing import run_tiny_pipeline, tiny_model
from fedcore.types import ClientUpdate
from fedcore_fair import LOSS, QFedAvg, QFFLLoss

W = [1.0, -2.0]


class Global(nn.Module):
    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.tensor(W, dtype=torch.float64))


def uploads(models, losses, samples=(1, 1)):
    base = torch.tensor(W, dtype=torch.float64)
    return [ClientUpdate(client_id=i, num_examples=n, base={"w": base.clone()}, metrics={LOSS: loss},
                         tensors={"w": torch.tensor(m, dtype=torch.float64)})
            for i, (m, loss, n) in enumerate(zip(models, losses, samples))]


def test_q_fedavg_hand_computation():
    # Li et al. (2020), Alg. 2, with η = 0.1 (L = 10), q = 1, w^t = (1, −2):
    #   A: w̄ = (0.9, −2.0), F = 2.0: ΔW = 10 (w^t − w̄) = (1, 0);  Δ = F ΔW = (2, 0);  h = q F⁰ ||ΔW||² + L F = 1 + 20
    #   B: w̄ = (1.0, −1.8), F = 0.5: ΔW = (0, −2);  Δ = (0, −1);  h = 4 + 5 = 9
    #   w^{t+1} = w^t − (Δ_A + Δ_B) / (h_A + h_B) = (1 − 2/30, −2 + 1/30)
    ups = uploads([[0.9, -2.0], [1.0, -1.8]], [2.0, 0.5])
    out = QFedAvg(q=1.0, local_lr=0.1).fedcore_aggregate(model=Global(), updates=ups, ctx=None)
    assert torch.allclose(out.state["w"], torch.tensor([1 - 2 / 30, -2 + 1 / 30], dtype=torch.float64), atol=1e-9)
    assert out.metrics["loss_max"] == pytest.approx(2.0) and out.metrics["loss_std"] == pytest.approx(0.75)


def test_q_two_weighs_the_worse_client_more():
    # q = 2: Δ = F² ΔW, h = 2 F ||ΔW||² + L F²: A (F = 2): Δ = (4, 0), h = 4 + 40 = 44; B (F = 0.5): Δ = (0, −0.5),
    # h = 4 + 2.5 = 6.5 -> w^{t+1} = w^t − (4, −0.5) / 50.5
    ups = uploads([[0.9, -2.0], [1.0, -1.8]], [2.0, 0.5])
    out = QFedAvg(q=2.0, local_lr=0.1).fedcore_aggregate(model=Global(), updates=ups, ctx=None)
    assert torch.allclose(out.state["w"], torch.tensor([1 - 4 / 50.5, -2 + 0.5 / 50.5], dtype=torch.float64),
                          atol=1e-9)


def test_q_zero_is_the_uniform_mean():
    # q = 0: Δ = ΔW, h = L, so w^{t+1} = w^t − Σ L (w^t − w̄_k) / (n L) = mean of the w̄_k, whatever the losses
    ups = uploads([[0.9, -2.0], [1.0, -1.8]], [2.0, 0.5], samples=(1, 9))
    out = QFedAvg(q=0.0, local_lr=0.1).fedcore_aggregate(model=Global(), updates=ups, ctx=None)
    assert torch.allclose(out.state["w"], torch.tensor([0.95, -1.9], dtype=torch.float64), atol=1e-9)
    fedavg = run_tiny_pipeline([FedAvg(weighting="uniform")], rounds=2).model.state_dict()
    q0 = run_tiny_pipeline([QFedAvg(q=0.0, local_lr=0.05), QFFLLoss()], rounds=2).model.state_dict()
    assert all(torch.allclose(fedavg[k], q0[k], atol=1e-5) for k in fedavg)


@attrs.frozen(eq=False, kw_only=True)
class Uploads:
    """Records what every client uploaded in round 0 (observer)."""

    seen: dict = attrs.field(factory=dict)

    @fedcore.hookimpl
    def fedcore_client_done(self, client, update, ctx):
        if ctx.round == 0:
            self.seen[client.id] = update


def test_the_client_reports_its_loss_at_the_model_it_received_and_trains_as_before():
    with_loss, plain = Uploads(), Uploads()
    result = run_tiny_pipeline([QFFLLoss(), with_loss], rounds=1)
    run_tiny_pipeline([plain], rounds=1)
    model = tiny_model()                      # the global model every client received in round 0
    for c, update in with_loss.seen.items():
        idx = list(result.run.partition.train[c])
        x, y = next(iter(batches(result.run.train, idx, len(idx), shuffle=False)))
        with torch.no_grad():
            assert update.metrics[LOSS] == pytest.approx(float(nn.functional.cross_entropy(model(x), y)), rel=1e-5)
        assert all(torch.equal(v, plain.seen[c].tensors[k]) for k, v in update.tensors.items())


def test_qffl_without_the_loss_report_is_refused():
    with pytest.raises(ConfigError, match=r"qffl weighs each client by its loss .* add plugins = \[\"qffl-loss\"\]"):
        fedcore.Pipeline([QFedAvg()])
    with pytest.raises(ConfigError, match=r"qffl needs client 0's loss before training"):
        QFedAvg().fedcore_aggregate(model=Global(), updates=[ClientUpdate(client_id=0, num_examples=1, tensors={})],
                                    ctx=None)


def test_runs_under_fedasync():
    result = run_tiny_pipeline([QFedAvg(q=1.0), QFFLLoss(), AsyncSchedule(concurrency=2)], rounds=3)
    assert all(math.isfinite(r["test_accuracy"]) for r in result.history.rows)

