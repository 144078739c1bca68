"""The heterofl recipe: registered, nested prefix submodels, and its example learns."""
from pathlib import Path

import pytest
import torch

import fedcore
from fedcore.experiment import load_config, materialize, plan
from fedcore.models import micro_vit
from fedcore.testing import tiny_data

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "heterofl.toml"


def vit():
    torch.manual_seed(0)
    return micro_vit(num_classes=4, embed_dim=16, depth=2, num_heads=4)


def test_recipe_is_registered_with_the_prefix_rule():
    info = fedcore.plugins.registry().get("heterofl", "recipe")
    assert info.distribution == "fedcore-heterofl"
    assert fedcore.recipes.get_recipe("heterofl").slots["split"] == {"name": "submodel-share", "rule": "prefix"}


def test_submodels_nest_in_the_first_units():
    """Widths 1/4 and 1/2: head 0 and hidden units 0-7 train with both, heads 2-3 with neither."""
    train, test = tiny_data(n=48, n_test=24)
    start = vit().state_dict()
    pipe = fedcore.recipe("heterofl", split={"widths": [0.25, 0.5]}, local_update={"optimizer": "sgd", "lr": 0.1})
    result = pipe.run(model=vit(), train=train, test=test, num_clients=2, rounds=3, seed=0)
    end = result.model.state_dict()
    qkv = (end["blocks.0.attn.qkv.weight"] - start["blocks.0.attn.qkv.weight"]).view(3, 4, 4, 16)
    moved = qkv.abs().amax(dim=(0, 2, 3))
    assert moved[0] > 0 and moved[1] > 0 and moved[2] == 0 and moved[3] == 0, moved
    fc1 = (end["blocks.1.mlp.fc1.weight"] - start["blocks.1.mlp.fc1.weight"]).abs().amax(dim=1)
    assert bool((fc1[:16] > 0).all()) and bool((fc1[16:] == 0).all())


@pytest.mark.slow
def test_example_config_learns():
    m = materialize(plan(load_config(EXAMPLE)))
    threads = torch.get_num_threads()
    torch.set_num_threads(1)   # micro models: two threads contend on a shared two-core machine
    try:
        result = m.plan.pipeline.run(model=m.model, train=m.train, test=m.test, **m.run_kwargs)
    finally:
        torch.set_num_threads(threads)
    accuracy = result.history.column("test_accuracy")
    assert len(accuracy) == 8 and accuracy[-1] > 0.25 > accuracy[0], accuracy   # chance is 0.1
