"""The ``vectorised`` cohort: every client ends where the one-by-one (``per-job``) cohort takes it, within 1e-5 in
fp32, for SGD, momentum, Adam, weight decay and FedProx, with BatchNorm, dropout and unequal local data; runs
give the same history; what cannot be vectorised runs one by one, bit for bit, and the log says so once."""
from __future__ import annotations

import logging

import attrs
import pytest
import torch
from torch import nn

import fedcore
from fedcore.builtin import PerJobCohort, QuantitySkewPartition, SGDUpdate, VectorisedCohort
from fedcore.data import ArrayDataset
from fedcore.runtime import SimClock
from fedcore.testing import tiny_data


def mlp_dropout() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Flatten(), nn.Linear(64, 16), nn.ReLU(), nn.Dropout(0.3), nn.Linear(16, 4))


def bn_mlp() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Flatten(), nn.Linear(64, 16, bias=False), nn.BatchNorm1d(16), nn.ReLU(), nn.Dropout(0.2),
                         nn.Linear(16, 4))


def micro_cnn() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Conv2d(1, 4, 3), nn.ReLU(), nn.Flatten(), nn.Linear(4 * 36, 4))


UPDATES = {
    "sgd": SGDUpdate(lr=0.05, batch_size=7),
    "momentum-wd-2-epochs": SGDUpdate(lr=0.05, momentum=0.9, weight_decay=0.01, batch_size=9, epochs=2),
    "adam-wd-fedprox": SGDUpdate(lr=0.01, optimizer="adam", weight_decay=0.001, batch_size=7, mu=0.1),
}


@attrs.frozen(eq=False, kw_only=True)
class Uploads:
    """Records every client's uploaded tensors and metrics, per round."""

    seen: dict = attrs.field(factory=dict)

    @fedcore.hookimpl
    def fedcore_client_done(self, client, update, ctx):
        self.seen[(ctx.round, client.id)] = ({k: v.clone() for k, v in update.tensors.items()}, dict(update.metrics))


def _run(cohort, model, update, rounds=2, **kwargs):
    train, test = tiny_data(n=150)
    uploads = Uploads()
    result = fedcore.Pipeline([update, cohort, QuantitySkewPartition(), uploads]).run(
        model=model(), train=train, test=test, num_clients=5, rounds=rounds, seed=3, **kwargs)
    return result, uploads.seen


@pytest.mark.parametrize("update", list(UPDATES.values()), ids=list(UPDATES))
@pytest.mark.parametrize("model", [mlp_dropout, bn_mlp, micro_cnn])
def test_each_client_matches_its_one_by_one_update(model, update):
    _, alone = _run(PerJobCohort(), model, update, rounds=1)
    _, together = _run(VectorisedCohort(on_cpu="vectorise", chunk=3), model, update, rounds=1)
    assert alone.keys() == together.keys() and len(alone) == 5
    sizes = set()
    for key, (tensors, metrics) in alone.items():
        other, other_metrics = together[key]
        assert tensors.keys() == other.keys()
        for name, value in tensors.items():
            torch.testing.assert_close(other[name], value, rtol=0, atol=1e-5, msg=f"client {key[1]}, {name}")
        assert other_metrics["loss"] == pytest.approx(metrics["loss"], abs=1e-5)
        sizes.add(len(tensors))
    # the clients really trained (unequal data: QuantitySkew) and moved away from each other
    firsts = [t[next(iter(t))] for t, _ in together.values()]
    assert not all(torch.equal(firsts[0], f) for f in firsts[1:])


def test_batchnorm_clients_match_to_float64_rounding():
    """In fp32, BatchNorm on batches of 7 amplifies rounding to ~1e-6; in float64 the two paths agree to ~1e-14:
    the same arithmetic, in another order."""
    train, test = tiny_data(n=150)
    train, test = (ArrayDataset(d.x.double(), d.y) for d in (train, test))
    seen = []
    for cohort in (PerJobCohort(), VectorisedCohort(on_cpu="vectorise", chunk=3)):
        uploads = Uploads()
        fedcore.Pipeline([SGDUpdate(lr=0.1, momentum=0.9, batch_size=7), cohort, QuantitySkewPartition(), uploads]
                         ).run(model=bn_mlp().double(), train=train, test=test, num_clients=5, rounds=1, seed=3)
        seen.append(uploads.seen)
    for key, (tensors, _) in seen[0].items():
        for name, value in tensors.items():
            torch.testing.assert_close(seen[1][key][0][name], value, rtol=0, atol=1e-11)


def test_history_matches_one_by_one_at_the_same_seed():
    update = UPDATES["momentum-wd-2-epochs"]
    one, _ = _run(PerJobCohort(), bn_mlp, update, rounds=3, clock=SimClock(default_profile="phone"))
    vec, _ = _run(VectorisedCohort(on_cpu="vectorise"), bn_mlp, update, rounds=3,
                  clock=SimClock(default_profile="phone"))
    assert len(one.history.rows) == len(vec.history.rows) == 3
    assert vec.history.column("cohort_vectorised") == [5.0, 5.0, 5.0]  # every client, every round, in one batch
    for a, b in zip(one.history.rows, vec.history.rows):
        assert a.keys() == b.keys() - {"cohort_vectorised"}
        for key in a:
            if key in ("wall_s", "round_wall_s"):
                continue
            if isinstance(a[key], float):
                assert b[key] == pytest.approx(a[key], abs=1e-5), key
            else:
                assert b[key] == a[key], key  # virtual time, bytes, counts: the clock saw the same work


@attrs.frozen(eq=False, kw_only=True)
class HalfStepSGD:
    """A local update the vectorised cohort does not know."""

    @fedcore.hookimpl
    def fedcore_local_update(self, client, share, data, state, ctx):
        return SGDUpdate(lr=0.05).fedcore_local_update(client=client, share=share, data=data, state=state, ctx=ctx)


def test_an_unknown_local_update_runs_one_by_one_bit_for_bit_and_is_said_once(caplog):
    with caplog.at_level(logging.INFO, logger="fedcore.cohort"):
        vec, _ = _run(VectorisedCohort(on_cpu="vectorise"), mlp_dropout, HalfStepSGD(), rounds=3)
    one, _ = _run(PerJobCohort(), mlp_dropout, HalfStepSGD(), rounds=3)
    said = [r.getMessage() for r in caplog.records if r.name == "fedcore.cohort"]
    assert said == ["vectorised cohort: the local update 'HalfStepSGD' states no vectorised_plan for its own "
                    "fedcore_local_update (fedcore.training.TrainPlan); training one by one"]
    for name, value in one.model.state_dict().items():
        assert torch.equal(vec.model.state_dict()[name], value), name


def test_selectable_by_name_in_a_config():
    pipe = fedcore.Pipeline.from_config({"recipe": "fedavg", "cohort": {"name": "vectorised", "chunk": 8}})
    cohort = pipe.provider("cohort")
    assert isinstance(cohort, VectorisedCohort) and cohort.chunk == 8
    with pytest.raises(fedcore.ConfigError, match="on_cpu"):
        fedcore.Pipeline.from_config({"cohort": {"name": "vectorised", "on_cpu": "sometimes"}})
