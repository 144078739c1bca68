"""fedcore-fedv: FedV and FedVZ (federated split learning with a pre-trained ViT encoder on the server).

Recipes ``fedv`` and ``fedvz`` of the components :class:`FedVShare` (``fedv-share``) and :class:`FedVTrain`
(``fedv-train``) plus any aggregator; ``FedV`` / ``FedVZ`` are deprecated multi-slot shells.
"""
from fedcore_fedv.fedv import RECIPES, FedV, FedVZ
from fedcore_fedv.local_eval import LocalModelEval
from fedcore_fedv.paired import PairedTest, paired_test
from fedcore_fedv.server import FedVServer
from fedcore_fedv.share import FedVShare
from fedcore_fedv.train import FedVTrain

__all__ = ["RECIPES", "FedV", "FedVServer", "FedVShare", "FedVTrain", "FedVZ", "LocalModelEval", "PairedTest",
           "paired_test"]
