"""The split recipes reproduce the runs of the multi-slot classes they replace, bit for bit.

``data/golden_recipes.json`` was recorded from ``VanillaSL``, ``SplitFedV1``, ``SplitFedV2``, ``FedV`` and
``FedVZ`` as they were at main 44879aa, before they became recipes (``data/record_golden_recipes.py``, run
on that commit). Each recipe here must give the same history rows (wall-clock columns aside), ledger
rows and final weights (sha256 of every tensor's bytes), with one torch intra-op thread.
"""
from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
import torch

import fedcore
from fedcore.testing import tiny_data

pytest.importorskip("fedcore_fedv")

GOLDEN = Path(__file__).parent / "data" / "golden_recipes.json"
WALL = ("wall_s", "round_wall_s")
FEDV_SHARE = {"fedround": 2, "lr_server": 1e-2}
FEDV_TRAIN = {"batch_size": 16, "local_epochs": 1}
GLOBAL = {"evaluate": "global-eval"}  # the classes were scored by the default evaluator; the recipes use split-eval

RECIPES = {  # golden name -> (recipe, overrides, rounds)
    "sl": ("sl", {"local_update": {"batch_size": 16}}, 4),
    "splitfed-v1": ("splitfed-v1", {"local_update": {"batch_size": 16}}, 2),
    "splitfed-v2": ("splitfed-v2", {"split": {"server_momentum": 0.9}, "local_update": {"batch_size": 16}}, 2),
    "fedv": ("fedv", {"split": FEDV_SHARE, "local_update": FEDV_TRAIN, **GLOBAL}, 3),
    "fedv-participants": ("fedv", {"split": {**FEDV_SHARE, "aggregate_scope": "participants",
                                             "server_optimizer": "adam"}, "local_update": FEDV_TRAIN, **GLOBAL}, 3),
    "fedvz": ("fedvz", {"split": FEDV_SHARE, "local_update": FEDV_TRAIN, **GLOBAL}, 3),
}


def small_vit() -> torch.nn.Module:
    from fedcore.models import micro_vit

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        return micro_vit(num_classes=4, depth=2, embed_dim=16, num_heads=2)


def fingerprint(result) -> dict:
    rows = [{k: v for k, v in r.items() if k not in WALL} for r in result.history]
    weights = {k: hashlib.sha256(v.detach().contiguous().numpy().tobytes()).hexdigest()
               for k, v in result.model.state_dict().items()}
    return json.loads(json.dumps({"history": rows, "ledger": result.ledger.to_rows(), "weights": weights}))


def run_recipe(name: str, overrides: dict, rounds: int) -> dict:
    train, test = tiny_data(n=48, n_test=24)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        result = fedcore.recipe(name, **overrides).run(model=small_vit(), train=train, test=test, num_clients=3,
                                                       rounds=rounds, seed=0)
    finally:
        torch.set_num_threads(threads)
    return fingerprint(result)


@pytest.mark.parametrize("golden", sorted(RECIPES))
def test_recipe_reproduces_the_multi_slot_class(golden):
    want = json.loads(GOLDEN.read_text())[golden]
    got = run_recipe(*RECIPES[golden])
    # the per-round client metrics (client_<m>, _min, _max) came after the golden record: every column it has
    # must be equal, and the only new ones are client metrics
    for row, old in zip(got["history"], want["history"], strict=True):
        assert {k for k in row if k not in old} <= {k for k in row if k.startswith("client_")}
    assert [{k: r[k] for k in old} for r, old in zip(got["history"], want["history"])] == want["history"]
    assert got["ledger"] == want["ledger"]
    assert got["weights"] == want["weights"]
