"""The ``promptfl`` recipe is the pipeline of ``promptfl_pipeline`` (examples/prompt_promptfl.py): same history."""
from __future__ import annotations

import pytest

import fedcore
from fedcore_clip import prompted_clip
from fedcore_clip.testing import one_thread, shapes_data, tiny_backbone
from fedcore_promptfl import promptfl_pipeline


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
