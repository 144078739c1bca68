"""Seeded Byzantine clients: who attacks, what they upload, label flipping, and refusals."""
import attrs
import pytest
import torch

import fedcore
from fedcore.builtin import FedAvg, SGDUpdate
from fedcore.data import synthetic_classification
from fedcore.errors import ConfigError
from fedcore.testing import run_tiny_pipeline
from fedcore_robust import ATTACKER, Byzantine, FlippedLabels, LabelFlipSGD, choose_attackers


@attrs.frozen(eq=False, kw_only=True)
class Uploads:
    """Records what every client uploaded in round 0 (observer)."""

    seen: dict = attrs.field(factory=dict)

    @fedcore.hookimpl
    def fedcore_client_done(self, client, update, ctx):
        if ctx.round == 0:
            self.seen[client.id] = update


def attackers(result):
    return sorted(c for c, s in result.run.client_states.items() if s.stash.get(ATTACKER))


def run_context(seed, n=6):
    return fedcore.RunContext(seed=seed, num_clients=n, rounds=1, train=None,
                              server=fedcore.ServerState(model=torch.nn.Linear(1, 1)))


def test_attackers_are_drawn_from_the_runs_seed():
    a, b = choose_attackers(run_context(0), 2), choose_attackers(run_context(0), 2)
    assert a == b and len(set(a)) == 2 and set(a) <= set(range(6))
    assert len({tuple(choose_attackers(run_context(s), 2)) for s in range(8)}) > 1    # other seeds, other clients
    assert choose_attackers(run_context(0), 0) == []


def test_attackers_are_marked_in_their_client_state_at_run_start():
    result = run_tiny_pipeline([Byzantine(num_attackers=2)], rounds=1, num_clients=6, seed=3)
    assert attackers(result) == choose_attackers(run_context(3), 2)


@pytest.mark.parametrize(("attack", "factor"), [("sign-flip", -1.0), ("scaled", 10.0), ("sign-flip", -3.0)])
def test_an_attacker_uploads_its_change_times_the_factor_and_honest_clients_are_untouched(attack, factor):
    honest, attacked = Uploads(), Uploads()
    run_tiny_pipeline([honest], rounds=1, num_clients=4)
    scale = None if factor in (-1.0, 10.0) else abs(factor)
    result = run_tiny_pipeline([attacked, Byzantine(attack=attack, num_attackers=1, scale=scale)], rounds=1,
                               num_clients=4)
    (bad,) = attackers(result)
    for c, update in attacked.seen.items():
        for k, v in update.tensors.items():
            base, good = update.base[k], honest.seen[c].tensors[k]
            if c == bad and not k.endswith(("running_mean", "running_var")):
                assert torch.allclose(v, base + factor * (good - base), atol=1e-5), (c, k)
            else:
                assert torch.equal(v, good), (c, k)


def test_flipped_labels_view():
    data = synthetic_classification(n=12, num_classes=4, seed=0)
    view = FlippedLabels(data, 4)
    x, y = view.gather(torch.arange(12))
    assert torch.equal(x, data.x) and torch.equal(y, 3 - data.y)
    assert int(view[5][1]) == 3 - int(data.y[5]) and len(view) == 12


def test_label_flip_sgd_is_sgd_for_honest_clients_and_trains_attackers_on_flipped_labels():
    plain, flip, flipped = Uploads(), Uploads(), Uploads()
    run_tiny_pipeline([plain, SGDUpdate()], rounds=1, num_clients=4)
    run_tiny_pipeline([flip, LabelFlipSGD()], rounds=1, num_clients=4)             # nobody marked: exactly sgd
    for c in plain.seen:
        assert all(torch.equal(v, flip.seen[c].tensors[k]) for k, v in plain.seen[c].tensors.items())
    result = run_tiny_pipeline([flipped, Byzantine(attack="label-flip", num_attackers=1), LabelFlipSGD()], rounds=1,
                               num_clients=4)
    (bad,) = attackers(result)
    for c in plain.seen:
        same = all(torch.equal(v, flipped.seen[c].tensors[k]) for k, v in plain.seen[c].tensors.items())
        assert same == (c != bad)


def test_label_flip_attackers_hurt_fedavg():
    clean = run_tiny_pipeline([LabelFlipSGD(), FedAvg()], rounds=3, num_clients=5).history.last("test_accuracy")
    poisoned = run_tiny_pipeline([Byzantine(attack="label-flip", num_attackers=2), LabelFlipSGD(), FedAvg()],
                                 rounds=3, num_clients=5).history.last("test_accuracy")
    assert poisoned < clean - 0.2


def test_label_flip_without_its_local_update_is_refused():
    with pytest.raises(ConfigError, match=r"attack='label-flip' .* set local_update = \"label-flip-sgd\""):
        fedcore.Pipeline([Byzantine(attack="label-flip")])


def test_more_attackers_than_clients_is_refused():
    with pytest.raises(ConfigError, match=r"byzantine.num_attackers=5 is more than the 3 clients"):
        run_tiny_pipeline([Byzantine(num_attackers=5)], rounds=1, num_clients=3)
