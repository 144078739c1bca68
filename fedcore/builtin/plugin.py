"""Entry point ``builtin`` of the fedcore distribution: registers the built-in components, datasets and models."""
import fedcore
from fedcore import builtin
from fedcore.builtin import datasets_and_models
from fedcore.engine.executor import InlineExecutor
from fedcore.engine.ray_executor import RayExecutor
from fedcore.engine.threads_executor import ThreadsExecutor
from fedcore.experiment import runtime_tables
from fedcore.recipes import Recipe
from fedcore.registry import ComponentRegistry


@fedcore.hookimpl
def fedcore_register_components(registry: ComponentRegistry) -> None:
    registry.add("iid", builtin.IIDPartition)
    registry.add("dirichlet", builtin.DirichletPartition)
    registry.add("shards", builtin.ShardPartition)
    registry.add("fewshot", builtin.FewShotPartition)
    registry.add("quantity-skew", builtin.QuantitySkewPartition)
    registry.add("given", builtin.GivenPartition)
    registry.add("natural-id", builtin.NaturalIdPartition)  # the Flower Datasets names (docs/data.md)
    registry.add("pathological", builtin.PathologicalPartition)
    registry.add("inner-dirichlet", builtin.InnerDirichletPartition)
    registry.add("linear", builtin.LinearPartition)
    registry.add("square", builtin.SquarePartition)
    registry.add("exponential", builtin.ExponentialPartition)
    registry.add("fedavg", builtin.FedAvg)
    registry.add("sgd", builtin.SGDUpdate)
    registry.add("whole-model", builtin.WholeModel)
    registry.add("all-data", builtin.AllData)
    registry.add("per-job", builtin.PerJobCohort)
    registry.add("vectorised", builtin.VectorisedCohort)
    registry.add("uniform", builtin.UniformSync)
    registry.add("async", builtin.AsyncSchedule)
    registry.add("buffered", builtin.BufferedSchedule)
    registry.add("semi-async", builtin.SemiAsyncSchedule)
    registry.add("fedasync", builtin.FedAsyncMix)
    registry.add("fedbuff", builtin.FedBuffStep)
    registry.add("global-eval", builtin.GlobalEval)
    datasets_and_models.register(registry)
    registry.add_executor("inline", InlineExecutor)
    registry.add_executor("ray", RayExecutor)
    registry.add_executor("threads", ThreadsExecutor)
    runtime_tables.register(registry)  # clock, profiles, faults
    for name, recipe in RECIPES.items():
        registry.add_recipe(name, recipe)


RECIPES = {
    "fedavg": Recipe(slots={"split": "whole-model", "select": "all-data", "local_update": "sgd",
                            "aggregate": "fedavg", "schedule": "uniform"},
                     help="FedAvg (McMahan et al. 2017): sampled clients, local SGD, sample-weighted mean"),
    "fedprox": Recipe(slots={"split": "whole-model", "select": "all-data",
                             "local_update": {"name": "sgd", "mu": 0.01}, "aggregate": "fedavg",
                             "schedule": "uniform"},
                      help="FedProx (Li et al. 2020): FedAvg with the proximal term mu/2 ||w - w_g||^2"),
    "fedasync": Recipe(slots={"split": "whole-model", "local_update": "sgd", "aggregate": "fedasync",
                              "schedule": "async"},
                       help="FedAsync (Xie et al. 2019): every arrival mixed in with a staleness-discounted weight"),
    "fedbuff": Recipe(slots={"split": "whole-model", "local_update": "sgd", "aggregate": "fedbuff",
                             "schedule": "buffered"},
                      help="FedBuff (Nguyen et al. 2022): buffered asynchronous aggregation of K deltas"),
}
