"""``client_sync = 'fedavg_common_layers'``: the client-part units several clients hold are averaged each round."""
import pytest
import torch

import fedcore
from fedcore.errors import ConfigError
from fedcore.models import micro_cnn
from fedcore.testing import tiny_data
from fedcore_split import LABELS

SPLITS = [2, 3, 5]  # client 0 holds unit 1, client 1 units 1-2, client 2 units 1-4


def run(client_sync, *, rounds=1):
    torch.manual_seed(0)
    model = micro_cnn(num_classes=4, in_chans=1, width=8)
    train, test = tiny_data(n=100, n_test=24)
    pipe = fedcore.recipe("tree-learning", split={"splits": SPLITS}, cohort={"client_sync": client_sync})
    return pipe.run(model=model, train=train, test=test, num_clients=3, rounds=rounds, seed=0)


def samples(result, client):
    """Samples a client trained on, read off the ledger: its int64 labels went up once each."""
    return sum(r.nbytes for r in result.ledger.rows if r.kind == LABELS and r.direction == "up"
               and r.client == client) // 8


def weight_bytes(result, direction, client):
    return sum(r.nbytes for r in result.ledger.rows if r.kind == "weights" and r.direction == direction
               and r.client == client and r.round == 0)


def test_common_client_units_become_the_sample_weighted_mean_and_cross_the_channel():
    personal, synced = run("none"), run("fedavg_common_layers")
    before, after = personal.run.client_states, synced.run.client_states
    n = {c: samples(synced, c) for c in range(3)}
    assert len(set(n.values())) > 1  # unequal shards, so the weighting is tested
    assert n == {c: samples(personal, c) for c in range(3)}
    holders: dict[str, list[int]] = {}
    for c in range(3):
        for k, v in after[c].tensors.items():
            if v.is_floating_point():
                holders.setdefault(k, []).append(c)
    assert {k.split(".")[0] for k, cs in holders.items() if len(cs) == 3} == {"0"}
    assert {k.split(".")[0] for k, cs in holders.items() if len(cs) == 2} == {"1"}
    for k, cs in holders.items():
        if len(cs) == 1:  # a unit only one client holds is untouched
            assert torch.equal(after[cs[0]].tensors[k], before[cs[0]].tensors[k])
            continue
        total = sum(n[c] for c in cs)
        mean = sum(before[c].tensors[k] * (n[c] / total) for c in cs)
        for c in cs:
            assert torch.allclose(after[c].tensors[k], mean, atol=1e-6), (k, c)
            assert torch.equal(after[c].tensors[k], after[cs[0]].tensors[k])
        assert not torch.equal(before[cs[0]].tensors[k], before[cs[1]].tensors[k]) or "running" in k
    for c in range(3):
        common = sum(after[c].tensors[k].numel() * after[c].tensors[k].element_size()
                     for k, cs in holders.items() if c in cs and len(cs) > 1)
        sent_down = weight_bytes(personal, "down", c)  # the first download of the client part
        assert weight_bytes(personal, "up", c) == 0
        assert weight_bytes(synced, "up", c) == common > 0
        assert weight_bytes(synced, "down", c) == sent_down + common


def test_without_client_sync_personal_parts_differ_across_clients():
    states = run("none").run.client_states
    assert not torch.equal(states[0].tensors["0.conv.weight"], states[1].tensors["0.conv.weight"])


def test_client_sync_with_a_relayed_part_is_one_clear_error():
    with pytest.raises(ConfigError, match="client_sync='none'"):
        fedcore.recipe("sl-round-robin", cohort={"client_sync": "fedavg_common_layers"})
    with pytest.raises(ConfigError, match="fedavg_common_layers"):
        fedcore.recipe("tree-learning", cohort={"client_sync": "fedavg"})
