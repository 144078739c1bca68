"""The plugin's methods as recipes (``recipe = "dp-fedavg"`` in TOML); every slot stays replaceable."""
from __future__ import annotations

from fedcore import Recipe

_UNIFORM = {"aggregate": {"name": "fedavg", "weighting": "uniform"}}

RECIPES: dict[str, Recipe] = {
    "dp-fedavg": Recipe(slots=_UNIFORM, plugins=("dp-fedavg",), learning={"rounds": 10},  # noise: 5 rounds = 0.50
                        help="DP-FedAvg (McMahan et al. 2018): clipped client changes, central Gaussian noise, "
                             "RDP accounting"),
    "dp-fedavg-adaptive": Recipe(slots=_UNIFORM, plugins=({"name": "dp-fedavg", "clipping": "adaptive"},),
                                 help="DP-FedAvg with adaptive clipping at the median norm (Andrew et al. 2021)"),
    "dp-sgd": Recipe(slots={"local_update": "dp-sgd"},
                     help="FedAvg over clients that train with sample-level DP-SGD (Opacus)"),
}
