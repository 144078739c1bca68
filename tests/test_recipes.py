"""Recipes: a method's named preset of single-slot components, each slot replaceable by name or patched."""
import pytest
import torch

import fedcore
from fedcore.builtin import FedAvg, SGDUpdate
from fedcore.data import synthetic_classification
from fedcore.errors import ConfigError, UnknownComponentError
from fedcore.experiment import load_config, plan
from fedcore.models import tiny_mlp
from fedcore.recipes import Recipe, get_recipe
from fedcore.registry import ComponentRegistry
from fedcore.settings import settings_of


def slot_names(pipe):
    return pipe.describe()["slots"]


def test_builtin_recipes_name_their_components():
    pipe = fedcore.recipe("fedbuff")
    slots = slot_names(pipe)
    assert slots["aggregate"] == "fedbuff" and slots["schedule"] == "buffered" and slots["split"] == "whole-model"
    assert settings_of(pipe.provider("local_update"))["mu"] == 0.0
    assert settings_of(fedcore.recipe("fedprox").provider("local_update"))["mu"] == 0.01


def test_a_slot_is_replaced_by_name_or_patched_by_settings():
    replaced = fedcore.recipe("fedavg", aggregate="fedbuff")
    assert slot_names(replaced)["aggregate"] == "fedbuff"
    assert slot_names(replaced)["local_update"] == "sgd"
    patched = fedcore.recipe("fedprox", local_update={"lr": 0.3})
    s = settings_of(patched.provider("local_update"))
    assert s["lr"] == 0.3 and s["mu"] == 0.01  # the recipe's other settings stay
    instance = FedAvg(weighting="uniform")
    assert fedcore.recipe("fedavg", aggregate=instance).provider("aggregate") is instance


def test_recipe_runs_exactly_as_the_same_pipeline_written_out():
    train = synthetic_classification(n=120, num_classes=3, shape=(8,), seed=0)
    test = synthetic_classification(n=40, num_classes=3, shape=(8,), seed=1)

    def run(pipe):
        torch.manual_seed(0)
        res = pipe.run(model=tiny_mlp(num_classes=3, in_features=8, hidden=16), train=train, test=test,
                       num_clients=4, rounds=2, seed=3)
        return res.history.rows, res.model.state_dict()

    by_recipe = run(fedcore.recipe("fedprox", local_update={"lr": 0.2}))
    by_hand = run(fedcore.Pipeline([SGDUpdate(lr=0.2, mu=0.01), FedAvg()]))
    strip = lambda rows: [{k: v for k, v in r.items() if "wall" not in k} for r in rows]  # noqa: E731
    assert strip(by_recipe[0]) == strip(by_hand[0])
    assert all(torch.equal(by_recipe[1][k], by_hand[1][k]) for k in by_hand[1])


def test_bad_recipe_input_is_one_clear_error():
    with pytest.raises(UnknownComponentError, match="unknown recipe 'fedvv'.*fedavg"):
        fedcore.recipe("fedvv")
    with pytest.raises(ConfigError, match="unknown pipeline key.*aggregator"):
        fedcore.recipe("fedavg", aggregator="fedbuff")
    with pytest.raises(ConfigError, match="has no 'partition' component"):
        fedcore.recipe("fedavg", partition={"alpha": 0.1})  # patching a slot the recipe leaves to the default
    with pytest.raises(ConfigError, match="unknown"):
        Recipe(slots={"aggregat": "fedavg"})
    with pytest.raises(ConfigError, match="name"):
        Recipe(slots={"aggregate": {"weighting": "uniform"}})
    with pytest.raises(TypeError, match="Recipe"):
        ComponentRegistry().add_recipe("x", {"aggregate": "fedavg"})


def test_recipe_registration_clash_names_both_sources():
    reg = ComponentRegistry()
    reg.add_recipe("m", Recipe(slots={"aggregate": "fedavg"}))
    with pytest.raises(fedcore.PluginConflictError, match="recipe name 'm'"):
        reg.add_recipe("m", Recipe(slots={"aggregate": "fedbuff"}))
    assert reg.names("recipe") == ["m"] and reg.names("component") == []


TOML = """
rounds = 2
num_clients = 4
dataset = { name = "synthetic", n = 120, n_test = 40 }
model = "tiny-mlp"
recipe = "fedprox"

[pipeline]
partition = { name = "dirichlet", alpha = 0.5 }
local_update = { lr = 0.2 }
aggregate = { name = "fedavg", weighting = "uniform" }
"""


def test_toml_recipe_resolves_to_the_full_pipeline(tmp_path):
    path = tmp_path / "r.toml"
    path.write_text(TOML)
    p = plan(load_config(path))
    pipe = p.resolved["pipeline"]
    assert pipe["local_update"]["name"] == "sgd" and pipe["local_update"]["mu"] == 0.01
    assert pipe["local_update"]["lr"] == 0.2
    assert pipe["aggregate"] == {"name": "fedavg", "weighting": "uniform"}
    assert pipe["partition"]["name"] == "dirichlet" and pipe["schedule"]["name"] == "uniform"
    # the resolved pipeline alone (no recipe key) plans to the same fingerprint: it reproduces the run
    written = path.read_text().replace('recipe = "fedprox"\n', "")
    again = tmp_path / "again.toml"
    again.write_text(written.split("[pipeline]")[0])
    cfg = load_config(again)
    cfg["pipeline"] = pipe
    assert plan(cfg).fingerprint == p.fingerprint


def test_toml_recipe_errors(tmp_path):
    path = tmp_path / "r.toml"
    path.write_text(TOML.replace('recipe = "fedprox"', 'recipe = "nope"'))
    with pytest.raises(ConfigError, match="unknown recipe 'nope'"):
        plan(load_config(path))
    path.write_text(TOML.replace("[pipeline]", '[pipeline]\nrecipe = "fedavg"'))
    with pytest.raises(ConfigError, match="disagree"):
        plan(load_config(path))


def test_get_recipe_and_describe():
    r = get_recipe("fedbuff")
    d = r.describe()
    assert d["slots"]["aggregate"] == "fedbuff" and "FedBuff" in d["help"]
    d["slots"]["aggregate"] = "changed"  # plain copies: the registered recipe is not touched
    assert get_recipe("fedbuff").slots["aggregate"] == "fedbuff"
