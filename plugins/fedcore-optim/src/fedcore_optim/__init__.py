"""Server optimisers for fedcore (Reddi et al., ICLR 2021; Hsu et al., 2019): FedAvgM, FedAdam, FedYogi, FedAdagrad."""
from fedcore_optim.change import AveragedChange, averaged_change, check_comparable, client_weights
from fedcore_optim.optimizers import (
    FEDADAGRAD_STATE,
    FEDADAM_STATE,
    FEDAVGM_STATE,
    FEDYOGI_STATE,
    FedAdagrad,
    FedAdam,
    FedAvgM,
    FedYogi,
    ServerOptimizer,
)
from fedcore_optim.recipes import RECIPES

__all__ = [
    "FEDADAGRAD_STATE", "FEDADAM_STATE", "FEDAVGM_STATE", "FEDYOGI_STATE", "RECIPES", "AveragedChange", "FedAdagrad",
    "FedAdam", "FedAvgM", "FedYogi", "ServerOptimizer", "averaged_change", "check_comparable", "client_weights",
]
