"""The drift-correction methods as recipes: each pairs its client (``local_update``) with its server (``aggregate``).

Every other slot is FedAvg's default and replaceable by name, e.g. ``fedcore.recipe("scaffold",
local_update={"option": "I"})`` for SCAFFOLD's option I, or ``schedule="buffered"``.
"""
from __future__ import annotations

from fedcore import Recipe

_FEDAVG = {"split": "whole-model", "select": "all-data", "schedule": "uniform"}

RECIPES: dict[str, Recipe] = {
    "scaffold": Recipe(slots={**_FEDAVG, "local_update": "scaffold-sgd", "aggregate": "scaffold"},
                       help="SCAFFOLD (Karimireddy et al. 2020): local steps corrected by control variates c − c_i "
                            "(option II; local_update option = \"I\" for option I)"),
    "fednova": Recipe(slots={**_FEDAVG, "local_update": "fednova-sgd", "aggregate": "fednova"},
                      help="FedNova (Wang et al. 2020): each client's change normalised by its local steps, then "
                           "averaged"),
    "feddyn": Recipe(slots={**_FEDAVG, "local_update": "feddyn-sgd", "aggregate": "feddyn"},
                     help="FedDyn (Acar et al. 2021): a dynamic linear + quadratic regulariser per client, the server "
                          "corrected by h/α (alpha on both slots)"),
}
