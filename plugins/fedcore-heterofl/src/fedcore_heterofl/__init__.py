"""HeteroFL (Diao et al., ICLR 2021) for fedcore: the ``heterofl`` recipe on the fedcore-pruning substrate."""
from fedcore_heterofl.recipe import HETEROFL

__all__ = ["HETEROFL"]
