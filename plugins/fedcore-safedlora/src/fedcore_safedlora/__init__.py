"""SA-FedLoRA for fedcore (Yang et al., arXiv:2405.09394), its ablations and the paper's baselines."""
from fedcore_safedlora.baselines import FedAvgScratch, FedBit, FedFFT, FedPer, Local, PersonalEval, reinitialise
from fedcore_safedlora.costs import converged_cost, convergence_round, cost_to_target, reduction
from fedcore_safedlora.sa_fedlora import FedLoRA, SAFedLoRA
from fedcore_safedlora.training import Trainer, train_trainable  # train_trainable: deprecated, not in __all__

__all__ = [
    "FedAvgScratch", "FedBit", "FedFFT", "FedLoRA", "FedPer", "Local", "PersonalEval", "SAFedLoRA", "Trainer",
    "converged_cost", "convergence_round", "cost_to_target", "reduction", "reinitialise",
]
