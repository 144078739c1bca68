"""FedVKD (federated ViT training by bidirectional knowledge distillation) on the ``fedcore_distill`` substrate:
the recipe ``fedvkd`` and the baselines ``fedavg-vit``, ``fedavg-cnn``, ``fedavg-edge``."""
from fedcore_fedvkd.recipes import MICRO_DATA, RECIPES

__all__ = ["MICRO_DATA", "RECIPES"]
