"""fedcore-fedv: FedV and FedVZ (federated split learning with a pre-trained ViT encoder on the server)."""
from fedcore_fedv.fedv import FedV, FedVZ
from fedcore_fedv.paired import PairedTest, paired_test
from fedcore_fedv.server import FedVServer

__all__ = ["FedV", "FedVServer", "FedVZ", "PairedTest", "paired_test"]
