"""q-FFL as a recipe: FedAvg's pipeline with ``qffl`` aggregating and ``qffl-loss`` reporting each client's loss."""
from __future__ import annotations

from fedcore import Recipe

RECIPES: dict[str, Recipe] = {
    "qffl": Recipe(slots={"split": "whole-model", "select": "all-data", "local_update": "sgd", "aggregate": "qffl",
                          "schedule": "uniform"}, plugins=("qffl-loss",),
                   help="q-FFL / q-FedAvg (Li et al. 2020): clients with a larger loss weigh more, by q"),
}
