"""The synchronous engine: determinism, the network ledger, bad updates, bad input, evaluation cadence, client state."""
from __future__ import annotations

import math

import attrs
import pytest
import torch
from torch import nn

import fedcore
from fedcore.builtin import DirichletPartition, FedAvg, GivenPartition, SGDUpdate, UniformSync, weighted_mean
from fedcore.errors import AggregateError, ConfigError
from fedcore.stash import StashKey
from fedcore.testing import ContractFixture, HookRecorder, run_tiny_pipeline, tiny_data
from fedcore.types import AggregateResult


def bn_model() -> nn.Module:
    """A tiny model with BatchNorm (an integer buffer that is downloaded but never uploaded) and dropout."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        return nn.Sequential(nn.Flatten(), nn.Linear(64, 16), nn.BatchNorm1d(16), nn.ReLU(), nn.Dropout(0.2),
                             nn.Linear(16, 4))


BN = ContractFixture(model_factory=bn_model, num_clients=4)


@attrs.frozen(eq=False, kw_only=True)
class Sabotage:
    """SGD for everyone, except that client ``victim`` breaks its update in the way ``mode`` says."""

    mode: str
    victim: int = 1
    inner: SGDUpdate = attrs.field(factory=lambda: SGDUpdate(lr=0.1))

    @fedcore.hookimpl
    def fedcore_local_update(self, client, share, data, state, ctx):
        if client.id == self.victim and self.mode == "raise":
            raise RuntimeError("sensor unplugged")
        update = self.inner.fedcore_local_update(client=client, share=share, data=data, state=state, ctx=ctx)
        if client.id != self.victim:
            return update
        t = {k: v.clone() for k, v in update.tensors.items()}
        if self.mode == "nan":
            t["1.weight"][0, 0] = math.nan
        elif self.mode == "inf":
            t["5.bias"][1] = -math.inf
        elif self.mode == "shape":
            t["1.weight"] = t["1.weight"][:, :5]
        elif self.mode == "extra":
            t["smuggled"] = torch.zeros(3)
        return attrs.evolve(update, tensors=t)


def _state(model):
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def test_same_seed_same_history_and_weights_bit_for_bit_different_seed_differs():
    def run(seed):
        comps = [DirichletPartition(alpha=0.5, min_size=5), UniformSync(fraction=0.75),
                 SGDUpdate(lr=0.05, momentum=0.9), FedAvg()]
        return run_tiny_pipeline(comps, rounds=3, fixture=BN, seed=seed)

    a, b, c = run(0), run(0), run(1)
    assert a.history.comparable() == b.history.comparable()
    sa, sb, sc = _state(a.model), _state(b.model), _state(c.model)
    assert all(torch.equal(sa[k], sb[k]) for k in sa)
    assert a.history.comparable() != c.history.comparable()
    assert not all(torch.equal(sa[k], sc[k]) for k in sa if sa[k].is_floating_point())
    assert a.ledger.to_rows() == b.ledger.to_rows()


def test_ledger_counts_exactly_the_entries_sent():
    result = run_tiny_pipeline([UniformSync(fraction=0.5)], rounds=3, fixture=BN)
    state = bn_model().state_dict()
    down = sum(v.numel() * v.element_size() for v in state.values())
    up = sum(v.numel() * v.element_size() for v in state.values() if v.is_floating_point())
    assert down - up == 8  # BatchNorm's num_batches_tracked (int64) comes down but is never uploaded
    for row in result.history:
        n = len(row["clients"])
        assert n == 2
        assert row["bytes_down"] == n * down and row["bytes_up"] == n * up
        for c in row["clients"]:
            assert result.ledger.total(round=row["round"], client=c, direction="down", kind="weights") == down
            assert result.ledger.total(round=row["round"], client=c, direction="up", kind="weights") == up
    assert result.history[-1]["bytes_up_total"] == result.ledger.total(direction="up") == 3 * 2 * up
    assert result.summary()["bytes_down"] == 3 * 2 * down
    assert result.ledger.by_kind() == {("down", "weights"): 6 * down, ("up", "weights"): 6 * up}


@attrs.frozen(eq=False, kw_only=True)
class UploadingEval:
    """An evaluation in which every client uploads ``nbytes`` (FedML's test-feature upload, kd-eval's
    ``count_eval_traffic``): traffic booked *during* the evaluation, after the round's training traffic."""

    nbytes: int = 40

    @fedcore.hookimpl
    def fedcore_evaluate(self, model, dataset, clients, states, ctx):
        for c in clients:
            channel = fedcore.Channel(c.id, ctx.round)
            channel.up("eval_features", torch.zeros(self.nbytes // 4))
            ctx.run.ledger.book(channel)
        return {"test_accuracy": 0.0}


def test_the_evaluations_traffic_is_in_the_row_of_the_round_that_evaluated():
    """A row's ``bytes_up`` is everything booked for its round, the evaluation's upload included, and its
    ``bytes_up_total`` everything booked up to and including it (the evaluation was one row late before)."""
    result = run_tiny_pipeline([UploadingEval(nbytes=40)], rounds=3, fixture=BN, eval_every=2)
    clients = len(result.run.clients)
    running = 0
    for row in result.history:
        r = row["round"]
        booked = result.ledger.total(round=r, direction="up")
        evaluated = r in (1, 2)  # every 2nd round and the last
        assert result.ledger.total(round=r, direction="up", kind="eval_features") == (40 * clients if evaluated
                                                                                      else 0)
        running += booked
        assert (row["bytes_up"], row["bytes_up_total"]) == (booked, running), r
    assert result.history[-1]["bytes_up_total"] == result.ledger.total(direction="up")


@pytest.mark.parametrize(("mode", "reason"), [
    ("nan", "entry '1.weight' contains NaN or Inf"),
    ("inf", "entry '5.bias' contains NaN or Inf"),
    ("shape", "entry '1.weight' has shape (16, 5), expected (16, 64)"),
    ("extra", "uploaded entries ['smuggled'] that its share does not upload"),
])
def test_bad_update_is_rejected_reported_and_never_averaged(mode, reason):
    pipe = fedcore.Pipeline([Sabotage(mode=mode)])
    rec = HookRecorder(pipe)
    train, test = tiny_data()
    result = pipe.run(model=bn_model(), train=train, test=test, num_clients=3, rounds=2, seed=0)
    for row in result.history:
        assert row["clients"] == [0, 2]
        assert [r["client"] for r in row["rejected"]] == [1] and reason in row["rejected"][0]["reason"]
    calls = rec.getcalls("fedcore_aggregate")
    assert [[u.client_id for u in c["updates"]] for c in calls] == [[0, 2], [0, 2]]
    # the global model is exactly the weighted mean of the two accepted updates
    last = calls[-1]["updates"]
    expected = weighted_mean(last, [u.num_examples for u in last])
    final = result.model.state_dict()
    for k, v in expected.items():
        assert torch.equal(final[k], v)
    assert all(torch.isfinite(v).all() for v in final.values() if v.is_floating_point())
    # client_done still sees the rejected update (observers learn about it), aggregate never does
    assert sorted(c["client"].id for c in rec.getcalls("fedcore_client_done")) == [0, 0, 1, 1, 2, 2]


def test_a_client_that_raises_is_reported_and_the_run_goes_on():
    result = run_tiny_pipeline([Sabotage(mode="raise")], rounds=2)
    assert len(result.history) == 2
    for row in result.history:
        assert row["clients"] == [0, 2]
        assert row["failed"] == [{"client": 1, "error": "RuntimeError: sensor unplugged"}]
        assert row["test_accuracy"] >= 0.0
    # a failed client does not commit its round
    assert result.run.client_states[1].rounds_participated == 0
    assert result.run.client_states[0].rounds_participated == 2


def test_more_clients_than_samples():
    train, test = tiny_data(n=8)
    with pytest.raises(ConfigError, match=r"num_clients=9 is more than the 8 training samples"):
        fedcore.Pipeline([]).run(model=bn_model(), train=train, test=test, num_clients=9, rounds=1)


@pytest.mark.parametrize(("parts", "message"), [
    (((0, 1, 2), ()), r"the partition leaves client 1 with no training samples; use fewer clients \(num_clients=2\)"),
    (((0, 1), (2, 500)), r"client 1 has sample indices outside the training set of 96: \[500\]"),
    (((0, 1, 2),), r"the partition has 1 clients; num_clients=2"),
])
def test_bad_partitions_are_clear_errors(parts, message):
    with pytest.raises(ConfigError, match=message):
        run_tiny_pipeline([GivenPartition(parts=parts)], num_clients=2, rounds=1)


@attrs.frozen(eq=False, kw_only=True)
class WrongAggregate:
    """Returns an aggregate that does not fit the global model."""

    state: dict

    @fedcore.hookimpl
    def fedcore_aggregate(self, model, updates):
        return AggregateResult(state=self.state)


def test_an_aggregate_that_does_not_match_the_model_is_a_clear_error():
    with pytest.raises(AggregateError, match=r"the aggregate from WrongAggregate names entries the global model does "
                                             r"not have: \['head.weight'\]"):
        run_tiny_pipeline([WrongAggregate(state={"head.weight": torch.zeros(2)})], rounds=1)
    with pytest.raises(AggregateError, match=r"the aggregate from WrongAggregate: entry '1.bias' has shape \(3,\), "
                                             r"the global model has \(32,\)"):
        run_tiny_pipeline([WrongAggregate(state={"1.bias": torch.zeros(3)})], rounds=1)


def test_bad_run_arguments():
    for kwargs, message in (({"rounds": -1}, "rounds=-1; must be >= 0"), ({"eval_every": 0}, "eval_every=0"),
                            ({"num_clients": 0}, "num_clients=0; must be >= 1")):
        with pytest.raises(ConfigError, match=message):
            run_tiny_pipeline([], **kwargs)


def test_eval_every_k_rounds_and_always_the_last():
    result = run_tiny_pipeline([], rounds=5, eval_every=2)
    assert [r["round"] for r in result.history if "test_accuracy" in r] == [1, 3, 4]
    assert result.history.last("test_accuracy") == result.history[4]["test_accuracy"]
    assert all("train_loss" in r and "round_wall_s" in r for r in result.history)


COUNT = StashKey[int]("test.count")


@attrs.frozen(eq=False, kw_only=True)
class CountingUpdate:
    """SGD that also counts, in client state that never leaves the client, how often it trained."""

    inner: SGDUpdate = attrs.field(factory=SGDUpdate)

    @fedcore.hookimpl
    def fedcore_local_update(self, client, share, data, state, ctx):
        state.stash[COUNT] = state.stash.get(COUNT, 0) + 1
        state.tensors["rounds_seen"] = state.tensors.get("rounds_seen", torch.zeros(())) + 1
        return self.inner.fedcore_local_update(client=client, share=share, data=data, state=state, ctx=ctx)


def test_client_state_persists_across_rounds_and_never_crosses_the_network():
    result = run_tiny_pipeline([CountingUpdate(), UniformSync(fraction=0.5)], rounds=5, num_clients=4)
    appearances = {c: sum(c in r["clients"] for r in result.history) for c in range(4)}
    assert sum(appearances.values()) == 10 and len(set(appearances.values())) > 1  # sampling varied
    for c, n in appearances.items():
        state = result.run.client_states[c]
        assert state.rounds_participated == n
        assert state.stash.get(COUNT, 0) == n
        assert float(state.tensors.get("rounds_seen", torch.zeros(()))) == n
    plain = run_tiny_pipeline([UniformSync(fraction=0.5)], rounds=5, num_clients=4)
    assert result.ledger.to_rows() == plain.ledger.to_rows()  # the state added no traffic


@attrs.frozen(eq=False, kw_only=True)
class PersonalBias:
    """FedAvg, plus a personalised download of the head's bias for client 0 only."""

    @fedcore.hookimpl
    def fedcore_aggregate(self, model, updates, ctx):
        avg = FedAvg().fedcore_aggregate(model=model, updates=updates, ctx=ctx)
        return AggregateResult(state=avg.state, per_client={0: {"3.bias": torch.full((4,), 7.0)}})


SEEN = StashKey[list]("test.seen_bias")


@attrs.frozen(eq=False, kw_only=True)
class RecordDownload:
    """Remembers the head bias each client started every round from."""

    inner: SGDUpdate = attrs.field(factory=SGDUpdate)

    @fedcore.hookimpl
    def fedcore_local_update(self, client, share, data, state, ctx):
        state.stash.setdefault(SEEN, []).append(share.module.state_dict()["3.bias"].clone())
        return self.inner.fedcore_local_update(client=client, share=share, data=data, state=state, ctx=ctx)


def test_per_client_downloads_apply_to_that_client_only():
    result = run_tiny_pipeline([PersonalBias(), RecordDownload()], rounds=2)
    seen = {c: result.run.client_states[c].stash[SEEN] for c in range(3)}
    assert not torch.equal(seen[0][0], torch.full((4,), 7.0))     # round 0: nothing personalised yet
    assert torch.equal(seen[0][1], torch.full((4,), 7.0))         # round 1: client 0 got its own view
    assert torch.equal(seen[1][1], seen[2][1]) and not torch.equal(seen[1][1], seen[0][1])
    assert result.run.server.client_views.keys() == {0}
    # the global model holds the average, not client 0's view
    assert not torch.equal(result.model.state_dict()["3.bias"], torch.full((4,), 7.0))
