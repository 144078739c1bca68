"""The server optimisers as recipes: FedAvg's pipeline with the aggregate slot replaced (``recipe = "fedadam"``).

Every other slot is the built-in default and replaceable by name, e.g. ``fedcore.recipe("fedadam",
schedule="buffered")`` for FedBuff's schedule with an Adam server step.
"""
from __future__ import annotations

from fedcore import Recipe

_FEDAVG = {"split": "whole-model", "select": "all-data", "local_update": "sgd", "schedule": "uniform"}

RECIPES: dict[str, Recipe] = {
    "fedavgm": Recipe(slots={**_FEDAVG, "aggregate": "fedavgm"},
                      help="FedAvgM (Hsu et al. 2019): FedAvg with server momentum on the averaged client change"),
    "fedadam": Recipe(slots={**_FEDAVG, "aggregate": "fedadam"},
                      help="FedAdam (Reddi et al. 2021): an Adam server step on the averaged client change"),
    "fedyogi": Recipe(slots={**_FEDAVG, "aggregate": "fedyogi"},
                      help="FedYogi (Reddi et al. 2021): a Yogi server step on the averaged client change"),
    "fedadagrad": Recipe(slots={**_FEDAVG, "aggregate": "fedadagrad"},
                         help="FedAdagrad (Reddi et al. 2021): an Adagrad server step on the averaged client change"),
}
