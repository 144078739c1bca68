"""Personalised federated learning for fedcore: FedPer/FedRep personal heads, FedBN, Ditto and a personalised
evaluation that scores each client's own model on its own test split."""
from fedcore_personal.ditto import DittoUpdate, proximal_loss
from fedcore_personal.evaluate import PersonalEval, personal_evaluate
from fedcore_personal.fedrep import FedRepUpdate
from fedcore_personal.keep import KeepPersonal
from fedcore_personal.overlay import PERSONAL, keep_personal, keeps_personal, personal_copy
from fedcore_personal.recipes import RECIPES
from fedcore_personal.shares import FedBNShare, FedPerShare, batchnorm_entries, classifier_head, head_entries

__all__ = [
    "PERSONAL", "RECIPES", "DittoUpdate", "FedBNShare", "FedPerShare", "FedRepUpdate", "KeepPersonal", "PersonalEval",
    "batchnorm_entries", "classifier_head", "head_entries", "keep_personal", "keeps_personal", "personal_copy",
    "personal_evaluate", "proximal_loss",
]
