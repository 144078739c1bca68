"""CaFPT as a recipe: PromptFL's pipeline with candidate pools and the PVI selector (the pipeline of
``plugins/fedcore-cafpt/repro/cafpt_sweep.toml``).

Few-shot pools of ``pool_multiplier`` x N per class over 3 random classes per client, 30 % of the clients each
round, PVI selection of N = 2 per class (``select = "cafpt"``; ``select = { select = "random" }`` patches in
the paper's PromptFL baseline), CoOp update, uniform mean, prompt evaluation. Change N in both places:
``partition.shots`` and ``select.shots``.
"""
from __future__ import annotations

from typing import Any

from fedcore import Recipe
from fedcore_clip.configs import LEARNING, LEARNING_SETUP, TEST_SETUP

SLOTS: dict[str, Any] = {
    "partition": {"name": "fewshot", "shots": 2, "mode": "random_classes", "classes_per_client": 3,
                  "pool_multiplier": 4},
    "schedule": {"name": "uniform", "fraction": 0.3},
    "split": "prompt-share",
    "select": {"name": "cafpt", "shots": 2},
    "local_update": "promptfl",
    "aggregate": {"name": "fedavg", "weighting": "uniform"},
    "evaluate": "prompt-eval",
}

LEARNING_CAFPT: dict[str, Any] = {**LEARNING, "setup": {
    **LEARNING_SETUP, "num_clients": 10,
    "dataset": {**LEARNING_SETUP["dataset"], "n_train_per_class": 16},
    "pipeline": {"partition": {"shots": 2, "pool_multiplier": 4}, "select": {"shots": 2, "pvi_epochs": 5},
                 "local_update": {"epochs": 5, "lr": 0.003}}}}
"""CaFPT's learning check: the prompt recipes' (:data:`fedcore_clip.configs.LEARNING`) with 10 clients, so that 30 %
a round is 3 of them (with 3 clients it is one, and the global prompt swings to that client's classes: 35-57 %
after 20 rounds), pools of 8 a class from 16 training images a class, N = 2 selected by PVI."""

CAFPT = Recipe(
    slots=SLOTS, help="CaFPT (Guo 2024): PromptFL on the top-N pool samples by pointwise V-information",
    test_setup={**TEST_SETUP, "pipeline": {"partition": {"shots": 1, "classes_per_client": 2},
                                           "select": {"shots": 1, "pvi_epochs": 1, "save_scores": False},
                                           "local_update": {"epochs": 1}}},
    learning=LEARNING_CAFPT)
