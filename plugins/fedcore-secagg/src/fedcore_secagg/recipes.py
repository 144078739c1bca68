"""The plugin's methods as recipes (``recipe = "secagg-fedavg"`` in TOML); every slot stays replaceable."""
from __future__ import annotations

from fedcore import Recipe

RECIPES: dict[str, Recipe] = {
    "secagg-fedavg": Recipe(slots={"aggregate": "fedavg"}, plugins=("secagg",),
                            help="FedAvg under SecAgg+ (Bell et al. 2020): the server sees only the sum"),
    "secagg-dp-fedavg": Recipe(slots={"aggregate": {"name": "fedavg", "weighting": "uniform"}},
                               plugins=({"name": "secagg", "weighting": "uniform"},
                                        {"name": "dp-fedavg", "noise": "distributed", "clients_per_round": 4}),
                               help="distributed DP-FedAvg under SecAgg+: each client adds its noise share, the "
                                    "server sees only the noised sum (needs fedcore-dp)"),
}
