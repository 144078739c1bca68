"""FedGKT (He et al., group knowledge transfer) on the ``fedcore_distill`` substrate: the recipe ``fedgkt``."""
from fedcore_fedgkt.recipes import RECIPES

__all__ = ["RECIPES"]
