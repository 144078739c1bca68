"""fedcore-pruning: structured submodels of a timm-named ViT (rolling depth window, kept heads and hidden
units, output rows, exits), their physical extraction and exact scattering, a masked forward equal to
the sliced one, cost counters, FedRolex/HeteroFL index rules and the masked weighted-delta merge."""
from fedcore_pruning.aggregate import masked_delta, masked_weighted_delta
from fedcore_pruning.aggregator import MaskedDelta, global_shape
from fedcore_pruning.checks import vit_check_plan
from fedcore_pruning.counting import (
    OPTIMIZER_STATES,
    FlopCount,
    MemoryEstimate,
    ParameterCount,
    activation_bytes,
    count_flops,
    count_parameters,
    training_memory,
)
from fedcore_pruning.errors import SubmodelMismatchError
from fedcore_pruning.masked import binary_masks, masked_forward
from fedcore_pruning.rules import (
    check_width_keeps_a_head,
    fedrolex_spec,
    heterofl_spec,
    kept_count,
    prefix_indices,
    rolling_indices,
    rolling_window_start,
    width_spec,
)
from fedcore_pruning.shape import ViTShape
from fedcore_pruning.share import INDEX_RULES, SubmodelShare
from fedcore_pruning.slicing import (
    element_mask,
    extract,
    head_rows,
    index_map,
    scatter,
    trainable_names,
)
from fedcore_pruning.spec import BlockKeep, SubmodelSpec
from fedcore_pruning.train import SubmodelTrain, submodel_loss
from fedcore_pruning.updates import COORDINATES_META, SUBMODEL_META, submodel_of, to_global_coordinates, update_delta
from fedcore_pruning.vit import BlockMasks, PrunableViT

__all__ = [
    "COORDINATES_META", "INDEX_RULES", "OPTIMIZER_STATES", "SUBMODEL_META", "SubmodelMismatchError",
    "MaskedDelta", "SubmodelShare", "SubmodelTrain", "check_width_keeps_a_head", "element_mask", "global_shape",
    "submodel_loss", "submodel_of", "to_global_coordinates", "update_delta", "vit_check_plan",
    "BlockKeep", "BlockMasks", "FlopCount", "MemoryEstimate", "ParameterCount", "PrunableViT",
    "SubmodelSpec", "ViTShape", "activation_bytes", "binary_masks", "count_flops", "count_parameters", "extract",
    "fedrolex_spec", "head_rows", "heterofl_spec", "index_map", "kept_count", "masked_delta", "masked_forward",
    "masked_weighted_delta", "prefix_indices", "rolling_indices", "rolling_window_start", "scatter",
    "trainable_names", "training_memory", "width_spec",
]
