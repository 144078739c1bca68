"""fedcore-cos2p: Co-S2P (semi-asynchronous collaborative training of structured-pruned ViT submodels).

Three single-slot components on the ``fedcore-pruning`` substrate: ``Cos2pShare`` (split: budget ->
rolling depth window + learned width masks), ``Cos2pUpdate`` (local update: Eq. 2 mask phase, Eq. 3
self-distilled weight phase with Adan) and ``Cos2pAggregate`` (Eq. 4 γ, Eq. 5 element-wise merge).
"""
from fedcore_cos2p.aggregate import Cos2pAggregate, gamma, segment_ids
from fedcore_cos2p.budgets import ClientBudget, split_budget, window_blocks
from fedcore_cos2p.distill import kd_term, self_distillation_loss
from fedcore_cos2p.masks import binarize, kept_ratio, random_masks, ste_sample
from fedcore_cos2p.metrics import ru_eq17, run_ru, staleness_histogram
from fedcore_cos2p.partition import QuotaDirichletPartition
from fedcore_cos2p.recipes import RECIPES
from fedcore_cos2p.share import Cos2pShare
from fedcore_cos2p.update import Cos2pUpdate

__all__ = [
    "RECIPES", "ClientBudget", "Cos2pAggregate", "Cos2pShare", "Cos2pUpdate", "QuotaDirichletPartition", "binarize",
    "gamma", "kd_term", "kept_ratio", "random_masks", "ru_eq17", "run_ru", "segment_ids", "self_distillation_loss",
    "split_budget", "staleness_histogram", "ste_sample", "window_blocks",
]
