"""pFedPrompt's recipes are PromptFL's pipeline, built component by component, with the method's slots replaced:
same history."""
from __future__ import annotations

import pytest

import fedcore
from fedcore import Pipeline
from fedcore.builtin import FedAvg, FewShotPartition, UniformSync
from fedcore_clip import PromptEval, PromptShare, PromptUpdate, prompted_clip
from fedcore_clip.testing import one_thread, shapes_data, tiny_backbone
from fedcore_pfedprompt import PersonalPromptEval, PFedPromptEval, PromptAMP, PromptPer, PromptProx


@pytest.fixture(autouse=True)
def _one_thread():
    with one_thread():
        yield


def example_pipeline(*, update=None, aggregate=None, evaluate=None) -> Pipeline:
    """PromptFL's pipeline by hand, with micro arguments and the given slots replaced."""
    return Pipeline([
        FewShotPartition(shots=2, mode="disjoint", classes_per_client=2), UniformSync(fraction=1.0), PromptShare(),
        update or PromptUpdate(lr=0.05, epochs=1), aggregate or FedAvg(weighting="uniform"), evaluate or PromptEval(),
    ])


@pytest.mark.parametrize("recipe, method, n_personal", [
    ("pfedprompt", dict(evaluate=PFedPromptEval()), 0),
    ("promptper", dict(evaluate=PromptPer()), 2),
    ("promptprox", dict(update=PromptProx(lr=0.05, epochs=1)), 0),
    ("promptamp", dict(aggregate=PromptAMP(), evaluate=PersonalPromptEval()), 0),
])
def test_recipe_reproduces_the_example_pipeline(recipe, method, n_personal):
    train, test = shapes_data(6, 3, 6, stream="pfp-recipe")
    run = dict(train=train, test=test, num_clients=3, rounds=2, seed=2)

    def model():
        return prompted_clip(tiny_backbone(), train.classes, n_ctx=4, seed=2, n_personal=n_personal)

    expected = example_pipeline(**method).run(model=model(), **run)
    got = fedcore.recipe(recipe, local_update={"lr": 0.05, "epochs": 1}).run(model=model(), **run)
    assert got.history.comparable() == expected.history.comparable()
    assert "local_accuracy" in got.history.rows[-1]
