"""SA-FedLoRA for fedcore (Yang et al., arXiv:2405.09394), its ablations and the paper's baselines, as recipes."""
from fedcore_personal import FedPerShare, PersonalEval  # moved to fedcore-personal; re-exported for 0.2 code
from fedcore_safedlora.baselines import (
    BitFitShare,
    FromScratch,
    FullShare,
    LocalShare,
    PersonalUpdate,
    reinitialise,
)
from fedcore_safedlora.costs import converged_cost, convergence_round, cost_to_target, reduction
from fedcore_safedlora.plan import SAFedLoRAPlan
from fedcore_safedlora.recipes import RECIPES
from fedcore_safedlora.stage_share import StageShare
from fedcore_safedlora.stage_update import StageUpdate
from fedcore_safedlora.training import EpochsUpdate, Trainer
from fedcore_safedlora.training import train_trainable as train_trainable  # deprecated, not in __all__

__all__ = [
    "RECIPES", "BitFitShare", "EpochsUpdate", "FedPerShare", "FromScratch", "FullShare", "LocalShare", "PersonalEval",
    "PersonalUpdate", "SAFedLoRAPlan", "StageShare", "StageUpdate", "Trainer", "converged_cost", "convergence_round",
    "cost_to_target", "reduction", "reinitialise",
]

_REMOVED = {"SAFedLoRA": "sa-fedlora", "FedLoRA": "fedlora", "FedFFT": "fedfft", "FedAvgScratch": "fedavg-scratch",
            "FedBit": "fedbit", "FedPer": "fedper", "Local": "local"}


def __getattr__(name: str) -> object:
    if name in _REMOVED:  # the multi-slot classes of 0.1 are recipes since 0.1.1
        raise AttributeError(f"fedcore_safedlora.{name} was removed in 0.1.1: the method is the recipe "
                             f"{_REMOVED[name]!r} of single-slot components; use fedcore.recipe({_REMOVED[name]!r}) "
                             f"or recipe = {_REMOVED[name]!r} in TOML")
    raise AttributeError(f"module 'fedcore_safedlora' has no attribute {name!r}")
