"""The recipes are the Python pipelines (what plugins/fedcore-promptfl/repro/promptfl_sweep.toml runs): ``promptfl`` is
``promptfl_pipeline``, ``promptfl-finetune`` is ``finetune_pipeline``; same histories."""
from __future__ import annotations

import pytest
import torch

import fedcore
from fedcore_clip import prompted_clip
from fedcore_clip.testing import one_thread, shapes_data, tiny_backbone
from fedcore_promptfl import clip_image_classifier, finetune_pipeline, promptfl_pipeline


@pytest.fixture(autouse=True)
def _one_thread():
    with one_thread():
        yield


def test_the_recipe_reproduces_the_example_pipeline_exactly():
    train, test = shapes_data(6, 3, 6, stream="recipe")
    run = dict(train=train, test=test, num_clients=3, rounds=2, seed=4)
    settings = dict(shots=2, mode="disjoint", lr=0.05, epochs=1)
    example = promptfl_pipeline(**settings).run(model=prompted_clip(tiny_backbone(), train.classes, n_ctx=4, seed=4),
                                                **run)
    recipe = fedcore.recipe("promptfl", partition={"shots": 2}, local_update={"lr": 0.05, "epochs": 1})
    assert [type(c).__name__ for c in recipe.components] == [type(c).__name__ for c in promptfl_pipeline().components]
    again = recipe.run(model=prompted_clip(tiny_backbone(), train.classes, n_ctx=4, seed=4), **run)
    assert again.history.comparable() == example.history.comparable()
    assert len(again.history.rows) == 2 and again.history.rows[-1]["bytes_up"] > 0


def test_the_finetune_recipe_is_finetune_pipeline_and_records_macro_f1():
    train, test = shapes_data(6, 3, 6, stream="recipe")
    run = dict(train=train, test=test, num_clients=3, rounds=2, seed=4)
    example = finetune_pipeline(shots=2, mode="disjoint", lr=0.05, epochs=1).run(
        model=clip_image_classifier(tiny_backbone(), 6, init="pretrained", seed=4), **run)
    recipe = fedcore.recipe("promptfl-finetune", partition={"shots": 2}, local_update={"lr": 0.05, "epochs": 1})
    assert [type(c).__name__ for c in recipe.components] == [type(c).__name__ for c in finetune_pipeline().components]
    again = recipe.run(model=clip_image_classifier(tiny_backbone(), 6, init="pretrained", seed=4), **run)
    assert again.history.comparable() == example.history.comparable()
    f1 = again.history.column("test_macro_f1")
    assert len(f1) == 2 and all(0.0 <= v <= 1.0 for v in f1)


def test_clip_image_classifier_from_a_config_draws_head_and_scratch_tower_from_the_run_seed():
    """A sweep's seed s builds ``clip_image_classifier(backbone, K, init, seed=s)``, as the Python API does."""
    from fedcore.errors import ConfigError
    from fedcore.experiment import load_config, materialize, plan
    from fedcore_promptfl.plugin import clip_image_classifier_model

    def built(seed: int, init: str):
        cfg = load_config(None, base={
            "seed": seed, "rounds": 1, "num_clients": 3, "recipe": "promptfl-finetune",
            "dataset": {"name": "clip.shapes", "n_train_per_class": 2, "n_test_per_class": 1, "num_classes": 3},
            "model": {"name": "clip-image-classifier", "init": init}})
        return materialize(plan(cfg)).model

    seed_one = {}
    for init in ("pretrained", "scratch"):
        one, zero = built(1, init), built(0, init)
        seed_one[init] = one
        expected = clip_image_classifier(tiny_backbone(), 3, init=init, seed=1)
        assert all(torch.equal(a, b) for a, b in zip(one.state_dict().values(), expected.state_dict().values()))
        assert not torch.equal(one.head.weight, zero.head.weight)
    assert not torch.equal(seed_one["scratch"].visual.conv1.weight, seed_one["pretrained"].visual.conv1.weight)
    with pytest.raises(ConfigError, match="clip-image-classifier needs num_classes"):
        clip_image_classifier_model()
