"""Tree Learning (Guo, PhD thesis 2024, ch. 3) for fedcore: the algorithmic parts.

    from fedcore_treelearning import profile_model, SplitProblem, branch_and_bound
    profile = profile_model(model, sample_batch)                      # per-unit FLOPs, bytes, params
    problem = SplitProblem.from_devices(profile, devices, server_flops=50e9, batch_size=32)
    solution = branch_and_bound(problem)                              # Alg. 2; solution.splits per client
"""
from fedcore_treelearning.cost import SplitProblem, tree_time
from fedcore_treelearning.profiler import ModelProfile, UnitProfile, profile_model
from fedcore_treelearning.solver import SplitSolution, branch_and_bound, exhaustive
from fedcore_treelearning.units import partition_units

__all__ = ["ModelProfile", "SplitProblem", "SplitSolution", "UnitProfile", "branch_and_bound", "exhaustive",
           "partition_units", "profile_model", "tree_time"]
