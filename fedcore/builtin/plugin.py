"""Entry point ``builtin`` of the fedcore distribution: registers the built-in components, datasets and models."""
import fedcore
from fedcore import builtin
from fedcore.builtin import datasets_and_models
from fedcore.engine.executor import InlineExecutor
from fedcore.engine.ray_executor import RayExecutor
from fedcore.experiment import runtime_tables


@fedcore.hookimpl
def fedcore_register_components(registry):
    registry.add("iid", builtin.IIDPartition)
    registry.add("dirichlet", builtin.DirichletPartition)
    registry.add("shards", builtin.ShardPartition)
    registry.add("fewshot", builtin.FewShotPartition)
    registry.add("quantity-skew", builtin.QuantitySkewPartition)
    registry.add("given", builtin.GivenPartition)
    registry.add("fedavg", builtin.FedAvg)
    registry.add("sgd", builtin.SGDUpdate)
    registry.add("whole-model", builtin.WholeModel)
    registry.add("all-data", builtin.AllData)
    registry.add("per-job", builtin.PerJobCohort)
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
    runtime_tables.register(registry)  # clock, profiles, faults
