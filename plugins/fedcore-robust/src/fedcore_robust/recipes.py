"""The Byzantine-robust rules as recipes: FedAvg's pipeline with the aggregate slot replaced (``recipe = "krum"``).

Krum, Multi-Krum and Bulyan are set to tolerate f = 1; change it with ``aggregate = { f = 2 }`` (TOML) or
``fedcore.recipe("bulyan", aggregate={"f": 2})``. Their micro setup has 16 clients, so that every scheduler column
of the recipe matrix aggregates enough updates where the schedule allows it at all.
"""
from __future__ import annotations

from typing import Any

from fedcore import Recipe

_FEDAVG = {"split": "whole-model", "select": "all-data", "local_update": "sgd", "schedule": "uniform"}
SIXTEEN_CLIENTS: dict[str, Any] = {"num_clients": 16,
                                   "dataset": {"name": "synthetic", "n": 128, "n_test": 32, "num_classes": 4}}
"""A micro setup where a semi-asynchronous aggregation (μ = 0.5) gets 8 updates: Bulyan with f = 1 needs 7."""

RECIPES: dict[str, Recipe] = {
    "krum": Recipe(slots={**_FEDAVG, "aggregate": {"name": "krum", "f": 1}}, test_setup=SIXTEEN_CLIENTS,
                   help="Krum (Blanchard et al. 2017): the client change closest to its n − f − 2 nearest ones"),
    "multi-krum": Recipe(slots={**_FEDAVG, "aggregate": {"name": "multi-krum", "f": 1}}, test_setup=SIXTEEN_CLIENTS,
                         help="Multi-Krum (Blanchard et al. 2017): the mean of the n − f best-scoring client changes"),
    "bulyan": Recipe(slots={**_FEDAVG, "aggregate": {"name": "bulyan", "f": 1}}, test_setup=SIXTEEN_CLIENTS,
                     help="Bulyan (El Mhamdi et al. 2018): Krum selection, then a trimmed mean around the median"),
    "centred-clipping": Recipe(slots={**_FEDAVG, "aggregate": "centred-clipping"},
                               help="centred clipping (Karimireddy et al. 2021): changes clipped around the last "
                                    "aggregate"),
}
