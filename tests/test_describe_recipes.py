"""Recipes are discoverable: ``fedcore plugins`` lists them, ``fedcore describe RECIPE`` shows each slot's component
with its settings as the recipe sets them (``python -m fedcore`` itself: tests/test_discover.py)."""
from __future__ import annotations

import json

import fedcore
from fedcore.cli import main
from fedcore.describe import describe_name


def run_cli(capsys, *argv):
    rc = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return rc, out, err


def test_plugins_lists_every_recipe_with_its_help_and_distribution(capsys):
    rc, out, err = run_cli(capsys, "plugins")
    assert rc == 0, err
    recipes_part = out.split("recipes (fedcore describe NAME", 1)[1]
    for entry in fedcore.plugins.registry().entries("recipe"):
        line = next(line for line in recipes_part.splitlines()  # the row whose first cell is the name
                    if line.lstrip("│| ").split(" ", 1)[0] == entry.name)
        assert entry.help[:40] in line and (entry.distribution or "-") in line
    assert "recipe fedavg" not in out.split("recipes (", 1)[0]  # not repeated among the components


def test_describe_recipe_json_names_slots_components_and_the_recipe_settings(capsys):
    rc, out, err = run_cli(capsys, "describe", "fedprox", "--json")
    assert rc == 0, err
    info = json.loads(out)
    recipe = next(i for i in [info, *info["also"]] if i["kind"] == "recipe")
    assert recipe["slots"] == {"split": "whole-model", "select": "all-data", "local_update": "sgd",
                               "aggregate": "fedavg", "schedule": "uniform"}
    update = next(p for p in recipe["components"] if p["slot"] == "local_update")
    rows = {r["name"]: r for r in update["settings"]}
    assert rows["mu"]["value"] == 0.01 and rows["mu"]["set_by_recipe"] and rows["mu"]["default"] == 0.0
    assert rows["lr"]["value"] == rows["lr"]["default"] == 0.05 and not rows["lr"]["set_by_recipe"]
    assert update["distribution"] == "fedcore" and recipe["test_setup"]["model"] == {"name": "tiny-mlp"}


def test_describe_recipe_text_is_a_slot_table(capsys):
    rc, out, err = run_cli(capsys, "describe", "promptamp")
    assert rc == 0, err
    assert "promptamp  recipe from plugin pfedprompt (fedcore-pfedprompt" in out
    aggregate = next(line for line in out.splitlines() if "│ aggregate" in line)
    assert "promptamp" in aggregate and "self_weight=0.5" in aggregate and "sigma=5.0" in aggregate
    partition = next(line for line in out.splitlines() if "│ partition" in line)
    assert "*mode='disjoint'" in partition and "*shots=2" in partition
    assert 'recipe = "promptamp"' in out


def test_describe_name_of_a_prompt_recipe_matches_its_pipeline():
    info = next(i for i in [describe_name("pfedprompt"), *describe_name("pfedprompt")["also"]] if i["kind"] == "recipe")
    pipe = fedcore.recipe("pfedprompt")
    assert type(pipe.provider("evaluate")).__name__ == "PFedPromptEval" and info["slots"]["evaluate"] == "pfedprompt"
    assert type(pipe.provider("split")).__name__ == "PromptShare" and info["slots"]["split"] == "prompt-share"


def test_describe_shows_a_recipe_beside_the_component_of_its_name(capsys, monkeypatch):
    """``fedcore describe fedavg`` (the CLI's main, in process: ``python -m fedcore`` itself is checked by
    tests/test_discover.py::test_python_dash_m_fedcore_is_the_command, with ``describe``)."""
    monkeypatch.setenv("COLUMNS", "200")
    rc, out, err = run_cli(capsys, "describe", "fedavg")
    assert rc == 0, err
    assert "fedavg  component from plugin builtin" in out
    assert "fedavg  recipe from plugin builtin" in out
    assert "local_update" in out and "sgd" in out
