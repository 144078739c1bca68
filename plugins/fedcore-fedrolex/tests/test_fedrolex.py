"""The fedrolex recipe: registered, rolling over every head, and its example learns."""
from pathlib import Path

import pytest
import torch

import fedcore
from fedcore.experiment import load_config, materialize, plan
from fedcore.models import micro_vit
from fedcore.testing import tiny_data

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "fedrolex.toml"


def vit():
    torch.manual_seed(0)
    return micro_vit(num_classes=4, embed_dim=16, depth=2, num_heads=4)


def test_recipe_is_registered_with_the_rolling_rule():
    info = fedcore.plugins.registry().get("fedrolex", "recipe")
    assert info.distribution == "fedcore-fedrolex"
    recipe = fedcore.recipes.get_recipe("fedrolex")
    assert recipe.slots["split"] == {"name": "submodel-share", "rule": "rolling"}
    assert recipe.slots["aggregate"]["name"] == "masked-delta"


def test_quarter_width_clients_roll_over_every_head():
    """One head per client (width 1/4 of 4 heads): over 4 rounds the window visits all of them."""
    train, test = tiny_data(n=48, n_test=24)
    start = vit().state_dict()
    pipe = fedcore.recipe("fedrolex", split={"widths": [0.25]}, local_update={"optimizer": "sgd", "lr": 0.1})
    result = pipe.run(model=vit(), train=train, test=test, num_clients=2, rounds=4, seed=0)
    qkv = result.model.state_dict()["blocks.0.attn.qkv.weight"].view(3, 4, 4, 16)   # (q/k/v, head, head_dim, D)
    moved = (qkv - start["blocks.0.attn.qkv.weight"].view(3, 4, 4, 16)).abs().amax(dim=(0, 2, 3))
    assert bool((moved > 0).all()), f"heads never trained: {(moved == 0).nonzero().flatten().tolist()}"
    assert result.history.column("agg_coverage")[0] < 0.7


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
