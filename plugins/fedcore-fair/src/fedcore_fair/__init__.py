"""Fair resource allocation for fedcore: q-FFL / q-FedAvg (Li, Sanjabi, Beirami, Smith, ICLR 2020)."""
from fedcore_fair.qffl import LOSS, QFedAvg, QFFLLoss, loss_before_training
from fedcore_fair.recipes import RECIPES

__all__ = ["LOSS", "RECIPES", "QFFLLoss", "QFedAvg", "loss_before_training"]
