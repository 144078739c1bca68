"""fedcore's own components. They register through the same entry-point mechanism as any plugin."""
from fedcore.builtin.all_data import AllData
from fedcore.builtin.buffers import convex_mean, float_buffer_names
from fedcore.builtin.clone import share_frozen_copy
from fedcore.builtin.fedasync import AsyncRounds, AsyncSchedule, FedAsyncMix
from fedcore.builtin.fedavg import FedAvg, weighted_mean
from fedcore.builtin.fedbuff import BufferedRounds, BufferedSchedule, FedBuffStep
from fedcore.builtin.global_eval import GlobalEval, accuracy_and_loss
from fedcore.builtin.inner_dirichlet import InnerDirichletPartition
from fedcore.builtin.local_sgd import SGDUpdate
from fedcore.builtin.natural_id import NaturalIdPartition
from fedcore.builtin.partitioners import (
    DirichletPartition,
    FewShotPartition,
    GivenPartition,
    IIDPartition,
    QuantitySkewPartition,
    ShardPartition,
)
from fedcore.builtin.pathological import PathologicalPartition
from fedcore.builtin.per_job_cohort import PerJobCohort
from fedcore.builtin.semi_async import SemiAsyncRounds, SemiAsyncSchedule
from fedcore.builtin.size_partitioners import ExponentialPartition, LinearPartition, SquarePartition
from fedcore.builtin.stacked_optim import StackedOptimizer
from fedcore.builtin.staleness import staleness_weight
from fedcore.builtin.sync_rounds import SyncRounds, UniformSync
from fedcore.builtin.vectorised_cohort import VectorisedCohort
from fedcore.builtin.whole_model import WholeModel, working_copy

__all__ = [
    "AsyncRounds", "AsyncSchedule", "BufferedRounds", "BufferedSchedule", "FedAsyncMix", "FedBuffStep",
    "SemiAsyncRounds", "SemiAsyncSchedule", "staleness_weight",
    "AllData", "DirichletPartition", "FedAvg", "FewShotPartition", "GivenPartition", "GlobalEval", "IIDPartition",
    "ExponentialPartition", "InnerDirichletPartition", "LinearPartition", "NaturalIdPartition",
    "PathologicalPartition", "SquarePartition",
    "PerJobCohort", "QuantitySkewPartition", "SGDUpdate", "ShardPartition", "StackedOptimizer", "SyncRounds",
    "UniformSync", "VectorisedCohort", "WholeModel",
    "accuracy_and_loss", "convex_mean", "float_buffer_names", "share_frozen_copy", "weighted_mean", "working_copy",
]
