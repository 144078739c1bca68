"""Tree training through the engine: the ledger, the schedules, personal and relayed parts, re-partition, dropout."""
import pytest
import torch
from torch import nn

import fedcore
from fedcore.errors import ConfigError
from fedcore.models import micro_cnn
from fedcore.runtime import DeviceProfile, ResourceError, SimClock, presets
from fedcore.testing import tiny_data
from fedcore_split import INPUT_GRAD, LABELS, SMASHED


def cnn():
    torch.manual_seed(0)
    return micro_cnn(num_classes=4, in_chans=1, width=8)


def run(recipe, *, rounds=1, clients=3, n=96, model=None, **kw):
    train, test = tiny_data(n=n, n_test=24)
    run_kw = {k: kw.pop(k) for k in ("clock", "profiles") if k in kw}
    pipe = fedcore.recipe(recipe, **kw)
    return pipe.run(model=model or cnn(), train=train, test=test, num_clients=clients, rounds=rounds, seed=0, **run_kw)


def rows(result, kind, direction, client=None):
    return [r for r in result.ledger.rows if r.kind == kind and r.direction == direction
            and (client is None or r.client == client)]


def test_every_activation_and_gradient_crosses_the_clients_channel():
    result = run("tree-learning", split={"splits": [2, 3, 5]})
    act_bytes = {0: 8 * 8 * 8, 1: 8 * 8 * 8, 2: 16 * 4 * 4}  # after conv (8ch 8x8), conv (8ch 8x8), conv (16ch 4x4)
    for client, per_sample in act_bytes.items():
        up, down = rows(result, SMASHED, "up", client), rows(result, INPUT_GRAD, "down", client)
        labels = rows(result, LABELS, "up", client)
        assert len(up) == len(down) == len(labels) == 2  # 32 samples, batch 16
        assert sum(r.nbytes for r in up) == sum(r.nbytes for r in down) == 32 * per_sample * 4
    assert sum(r.nbytes for r in rows(result, "weights", "up")) == 0  # personal client parts: weights never go up


def test_sync_and_pipelined_step_the_server_once_per_iteration_round_robin_once_per_batch():
    sync = run("tl-optimal-split", n=192)
    pipelined = run("tree-learning", n=192)
    turns = run("sl-round-robin", n=192)
    assert sync.history.last("agg_tl_server_steps") == pipelined.history.last("agg_tl_server_steps") == 4
    assert turns.history.last("agg_tl_server_steps") == 12
    # the delayed gradient changes the numbers: pipelined is not the synchronous tree
    assert not torch.equal(sync.model.state_dict()["3.conv.weight"], pipelined.model.state_dict()["3.conv.weight"]) \
        or any(not torch.equal(sync.run.client_states[c].tensors[k], pipelined.run.client_states[c].tensors[k])
               for c in range(3) for k in sync.run.client_states[c].tensors)


def test_sl_round_robin_relays_the_client_part_through_the_global_model():
    result = run("sl-round-robin")
    assert all(not s.tensors for s in result.run.client_states.values())  # nothing personal
    up = rows(result, "weights", "up")
    assert {r.client for r in up} == {0, 1, 2}  # each turn hands its client part on


def test_personal_parts_stay_on_the_client_and_are_downloaded_once():
    result = run("tl-no-partition", rounds=2)  # common split 4: units 1..3 on every client
    states = result.run.client_states
    assert set(states[0].tensors) == {"0.conv.weight", "0.bn.weight", "0.bn.bias", "0.bn.running_mean",
                                      "0.bn.running_var", "0.bn.num_batches_tracked", "1.conv.weight", "1.bn.weight",
                                      "1.bn.bias", "1.bn.running_mean", "1.bn.running_var",
                                      "1.bn.num_batches_tracked"}
    first, second = (result.ledger.total(direction="down", kind="weights", round=r) for r in (0, 1))
    assert first > 0 and second == 0


def plan_of(result):
    return next(v for k, v in result.run.server.stash.items() if k.name == "fedcore.treelearning.plan")


def test_optimal_splits_follow_the_device_profiles_and_are_resolved_periodically():
    slow_cpu = DeviceProfile(name="slow-cpu", flops=1e6, up_bps=1e9, down_bps=1e9, memory_bytes=2 ** 30)
    slow_link = DeviceProfile(name="slow-link", flops=1e13, up_bps=1e3, down_bps=1e3, memory_bytes=2 ** 30)
    clock = SimClock({**presets(), "slow-cpu": slow_cpu, "slow-link": slow_link})
    cpu_bound = run("tree-learning", rounds=3, clock=clock, profiles=["slow-cpu"] * 3, split={"repartition_every": 2})
    link_bound = run("tree-learning", clock=clock, profiles=["slow-link"] * 3)
    assert plan_of(cpu_bound).splits == {0: 2, 1: 2, 2: 2}  # every extra client unit only adds compute
    assert min(plan_of(link_bound).splits.values()) >= 6  # the pooled 16-float map is the cheapest to send
    assert plan_of(cpu_bound).solves == 2  # rounds 0 and 2
    assert cpu_bound.history.column("agg_tl_solves") == [1.0, 1.0, 2.0]


def test_dropout_with_substitutes_uses_stored_activations_and_without_waits():
    base = run("tree-learning", n=192, clients=4)
    subst = run("tree-learning", n=192, clients=4,
                cohort={"dropout_fraction": 0.25, "dropout_start": 1, "dropout_iterations": 2})
    wait = run("tree-learning", n=192, clients=4,
               cohort={"dropout_fraction": 0.25, "dropout_start": 1, "dropout_iterations": 2, "substitute": False})
    assert subst.history.last("agg_tl_substituted") == 2
    assert base.history.last("agg_tl_substituted") == wait.history.last("agg_tl_substituted") == 0
    assert base.history.last("test_accuracy") == wait.history.last("test_accuracy")
    assert base.history.last("agg_tl_loss") != subst.history.last("agg_tl_loss")


def test_vertical_clients_hold_strips_of_the_same_samples_and_send_no_labels():
    result = run("tree-learning-vertical", clients=2, n=64)
    assert rows(result, LABELS, "up") == []
    up0, up1 = rows(result, SMASHED, "up", 0), rows(result, SMASHED, "up", 1)
    assert len(up0) == len(up1) == 4  # every client sees all 64 samples, batch 16
    assert 0.0 <= result.history.last("test_accuracy") <= 1.0


# -- bad input ---------------------------------------------------------------------------------

class Opaque(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(64, 4)

    def forward(self, x):
        return self.fc(x.flatten(1))


def test_a_model_that_cannot_be_cut_is_one_clear_error():
    with pytest.raises(ConfigError, match="cannot cut a model of type .*Opaque into partition units; supported"):
        run("tree-learning", model=Opaque())


def test_a_split_outside_the_model_is_one_clear_error():
    with pytest.raises(ConfigError, match=r"splits\[1\]=9 is outside the model: a Sequential has 7 units"):
        run("tree-learning", split={"splits": [2, 9, 3]})


def test_a_device_the_solver_cannot_fit_is_one_clear_error():
    tiny = DeviceProfile(name="tiny", flops=1e9, up_bps=1e7, down_bps=1e7, memory_bytes=1000)
    with pytest.raises(ResourceError, match=r"client 1 \(profile 'tiny'\) cannot hold even the smallest client part"):
        run("tree-learning", clock=SimClock({**presets(), "tiny": tiny}, check_memory=False),
            profiles=["tl-low", "tiny", "tl-high"])


def test_vertical_strips_that_do_not_tile_the_input_are_one_clear_error():
    with pytest.raises(ConfigError, match=r"vertical strips \[3, 3\] do not tile the input"):
        run("tree-learning-vertical", clients=2, n=64, split={"strips": [3, 3]})


def test_refused_combinations_say_what_to_use():
    with pytest.raises(ConfigError, match="round-robin' needs horizontal data"):
        fedcore.recipe("tree-learning-vertical", cohort={"schedule": "round-robin"}, split={"relay": True})
    with pytest.raises(ConfigError, match="never gives it a round's clients together"):
        fedcore.recipe("tree-learning", schedule="async")
    with pytest.raises(ConfigError, match="use cohort = \"tl-cohort\""):
        fedcore.recipe("tree-learning", cohort="per-job")
