"""Personalisation methods as recipes of single-slot components (``recipe = "ditto"``).

Each evaluates every client's own model with ``personal-eval``; give the run personal test splits
(``plugins = ["paired-test"]`` with fedcore-fedv installed, or a ``fewshot`` partition) to score each client on data
like its own. ``fedper`` (fedcore-safedlora) is FedPer from scratch with SA-FedLoRA's trainer, built from the same
components.
"""
from __future__ import annotations

from typing import Any

from fedcore import Recipe

MICRO_CNN: dict[str, Any] = {"model": {"name": "micro-cnn"}}
"""FedBN's micro setup: a model with BatchNorm layers (the default tiny MLP has none)."""

RECIPES: dict[str, Recipe] = {
    "fedper-head": Recipe(slots={"split": "fedper-share", "local_update": "sgd", "aggregate": "fedavg",
                                 "evaluate": "personal-eval", "schedule": "uniform"}, plugins=("keep-personal",),
                          help="FedPer (Arivazhagan et al. 2019): the classifier head stays on each client, the body "
                               "is averaged"),
    "fedrep": Recipe(slots={"split": "fedper-share", "local_update": "fedrep-sgd", "aggregate": "fedavg",
                            "evaluate": "personal-eval", "schedule": "uniform"}, plugins=("keep-personal",),
                     help="FedRep (Collins et al. 2021): fit the personal head, then train the shared "
                          "representation"),
    "fedbn": Recipe(slots={"split": "fedbn-share", "local_update": "sgd", "aggregate": "fedavg",
                           "evaluate": "personal-eval", "schedule": "uniform"}, plugins=("keep-personal",),
                    test_setup=MICRO_CNN,
                    help="FedBN (Li et al. 2021): BatchNorm layers stay on each client, the rest is averaged"),
    "ditto": Recipe(slots={"split": "whole-model", "local_update": "ditto-sgd", "aggregate": "fedavg",
                           "evaluate": "personal-eval", "schedule": "uniform"},
                    help="Ditto (Li et al. 2021): FedAvg plus a personal model per client, pulled toward the global "
                         "one by λ"),
}
