"""FedRolex (Alam et al., NeurIPS 2022) for fedcore: the ``fedrolex`` recipe on the fedcore-pruning substrate."""
from fedcore_fedrolex.recipe import FEDROLEX

__all__ = ["FEDROLEX"]
