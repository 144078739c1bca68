"""The ``cafpt`` recipe is the Python pipeline ``promptfl_pipeline(select=CaFPT(...))`` (PromptFL + CaFPT selection):
same history."""
from __future__ import annotations

import pytest

import fedcore
from fedcore_cafpt import CaFPT
from fedcore_clip import prompted_clip
from fedcore_clip.testing import one_thread, shapes_data, tiny_backbone
from fedcore_promptfl import promptfl_pipeline


@pytest.fixture(autouse=True)
def _one_thread():
    with one_thread():
        yield


def test_the_recipe_reproduces_the_example_pipeline_exactly():
    train, test = shapes_data(8, 2, 6, stream="cafpt-recipe")
    run = dict(train=train, test=test, num_clients=3, rounds=2, seed=1)
    example = promptfl_pipeline(shots=1, mode="random_classes", classes_per_client=2, pool_multiplier=4,
                                fraction=0.3, epochs=1, select=CaFPT(shots=1, pvi_epochs=1, save_scores=False))
    expected = example.run(model=prompted_clip(tiny_backbone(), train.classes, n_ctx=4, seed=1), **run)
    recipe = fedcore.recipe("cafpt", partition={"shots": 1, "classes_per_client": 2}, local_update={"epochs": 1},
                            select={"shots": 1, "pvi_epochs": 1, "save_scores": False})
    got = recipe.run(model=prompted_clip(tiny_backbone(), train.classes, n_ctx=4, seed=1), **run)
    assert got.history.comparable() == expected.history.comparable()
    assert all(len(row["clients"]) == 1 for row in got.history.rows)  # 30 % of 3 clients
