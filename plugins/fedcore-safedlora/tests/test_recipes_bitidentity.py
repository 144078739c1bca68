"""The recipes reproduce the multi-slot classes of 0.1 bit for bit (histories and final weights, same seed).

``data/multi_slot_reference.json`` was recorded from the 0.1 classes by ``reference_runs.py`` before they
were split into single-slot components; every configuration here must match it exactly.
"""
import importlib.util
import json
from pathlib import Path
from typing import Any

import pytest

import fedcore

_spec = importlib.util.spec_from_file_location("safedlora_reference_runs", Path(__file__).parent / "reference_runs.py")
assert _spec is not None and _spec.loader is not None
reference_runs = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(reference_runs)
CONFIGS, run = reference_runs.CONFIGS, reference_runs.run

REFERENCE = json.loads((Path(__file__).parent / "data" / "multi_slot_reference.json").read_text())
PLAN = {"t1_rounds", "t2_rounds", "r_a", "r_b", "t_a", "t_b", "scheduler", "cosine_n", "rank_rounding", "truncation",
        "lora_target_modules", "lora_init_std"}


def recipe_for(key: str) -> Any:
    """The recipe pipeline with the 0.1 component's settings, each given to the one component that owns it."""
    name, settings = CONFIGS[key]
    settings = dict(settings)
    overrides: dict[str, Any] = {}
    if settings.pop("aggregation_mode", "factors") == "product_svd":
        overrides["aggregate"] = "lora-product-svd"
    plan = {k: settings.pop(k) for k in list(settings) if k in PLAN}
    if plan:
        overrides["plugins"] = [{"name": "sa-fedlora-plan", **plan}]
    if settings:
        overrides["local_update"] = settings
    return fedcore.recipe(name, **overrides)


@pytest.mark.parametrize("key", sorted(CONFIGS))
def test_recipe_reproduces_the_multi_slot_class(key):
    got = run(recipe_for(key))
    assert got["history"] == REFERENCE[key]["history"]
    assert got["weights_sha256"] == REFERENCE[key]["weights_sha256"]
