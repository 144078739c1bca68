"""The ``[label_noise]`` config table: seeded symmetric label flips before partitioning, and a config cell of
examples/cafpt_sweep.toml equals the Python pipeline on the same noisy data, pools and prompt."""
from __future__ import annotations

import copy

import pytest
import torch

from fedcore.errors import ConfigError
from fedcore.experiment import materialize, plan, run_experiment
from fedcore.experiment.config import validate
from fedcore_cafpt import CaFPT, LabelNoise
from fedcore_clip import prompted_clip
from fedcore_clip.configs import load_clip, shapes
from fedcore_clip.testing import one_thread
from fedcore_promptfl import promptfl_pipeline

CONFIG = {
    "name": "cell", "seed": 3, "rounds": 2, "num_clients": 3, "threads": 1, "recipe": "cafpt",
    "dataset": {"name": "clip.shapes", "n_train_per_class": 12, "n_test_per_class": 2, "num_classes": 6},
    "model": {"name": "open_clip", "n_ctx": 4},
    "label_noise": {"rho": 0.5},
    "pipeline": {"partition": {"shots": 1, "classes_per_client": 2, "pool_multiplier": 4},
                 "select": {"shots": 1, "pvi_epochs": 1, "lr": 0.01, "save_scores": False},
                 "local_update": {"epochs": 1, "lr": 0.002}},
    "checkpoint": {"every": 0},
}


@pytest.fixture(autouse=True)
def _one_thread():
    with one_thread():
        yield


def config(**changes):
    cfg = copy.deepcopy(CONFIG)
    cfg.update(changes)
    return validate(cfg)


def test_flips_the_asked_fraction_to_other_classes_and_the_seed_decides_which():
    labels = torch.arange(6000) % 6
    noisy = LabelNoise(rho=0.3).flip(labels, 6, seed=0)
    changed = noisy != labels
    assert abs(float(changed.float().mean()) - 0.3) < 0.02
    assert int(noisy.min()) >= 0 and int(noisy.max()) <= 5
    # a flipped label goes to each of the 5 other classes about equally often
    shift = ((noisy[changed] - labels[changed]) % 6).bincount(minlength=6)
    assert shift[0] == 0 and all(abs(int(n) / int(changed.sum()) - 0.2) < 0.03 for n in shift[1:])
    assert torch.equal(LabelNoise(rho=0.3).flip(labels, 6, seed=0), noisy)
    assert not torch.equal(LabelNoise(rho=0.3).flip(labels, 6, seed=1), noisy)
    assert torch.equal(LabelNoise(rho=0.0).flip(labels, 6, seed=0), labels)


def test_the_config_table_flips_the_training_labels_from_the_run_seed():
    clean_train, clean_test = shapes(n_train_per_class=12, n_test_per_class=2, num_classes=6)
    m = materialize(plan(config()))
    assert torch.equal(m.train.y, LabelNoise(rho=0.5).flip(clean_train.y, 6, seed=3))
    assert 0.35 < float((m.train.y != clean_train.y).float().mean()) < 0.65
    assert torch.equal(m.test.y, clean_test.y) and torch.equal(m.train.x, clean_train.x)
    other_seed = materialize(plan(config(seed=4)))
    assert not torch.equal(other_seed.train.y, m.train.y)
    clean = materialize(plan(config(label_noise={"rho": 0.0})))
    assert torch.equal(clean.train.y, clean_train.y)
    assert plan(config()).fingerprint != plan(config(label_noise={"rho": 0.0})).fingerprint


@pytest.mark.parametrize("value, message", [({"rho": 1.5}, "rho"), ({"rate": 0.3}, "unknown setting"),
                                            (0.3, "expected table")])
def test_a_bad_label_noise_table_is_one_clear_error(value, message):
    with pytest.raises(ConfigError, match=message):
        validate({**CONFIG, "label_noise": value})


def test_a_config_cell_equals_the_python_pipeline_on_the_same_noisy_data(tmp_path):
    """What examples/cafpt_sweep.toml runs is PromptFL + CaFPT on labels flipped with the run's seed, the pools
    of that seed and a prompt drawn with that seed (the Python pipeline the old per-draw loop built)."""
    got = run_experiment(materialize(plan(config())), out=tmp_path / "cell", progress="none")
    train, test = shapes(n_train_per_class=12, n_test_per_class=2, num_classes=6)
    LabelNoise(rho=0.5).apply(train, seed=3)
    pipe = promptfl_pipeline(shots=1, mode="random_classes", classes_per_client=2, pool_multiplier=4, fraction=0.3,
                             lr=0.002, epochs=1, select=CaFPT(shots=1, lr=0.01, pvi_epochs=1, save_scores=False))
    model = prompted_clip(load_clip("fedcore-tiny-clip", None), train.classes, n_ctx=4, seed=3)
    expected = pipe.run(model=model, train=train, test=test, num_clients=3, rounds=2, seed=3)
    keys = ("clients", "train_loss", "test_accuracy")
    assert got.state == "finished"
    assert [{k: r.get(k) for k in keys} for r in got.rows] == [{k: r.get(k) for k in keys}
                                                               for r in expected.history.rows]
    assert got.rows[-1]["test_accuracy"] is not None
