"""How the contract checks run Tree Learning's components: together, on the tiny MLP (5 units with BatchNorm)."""
from __future__ import annotations

from typing import Any


def tree_check_plan(cls: type) -> Any:
    from fedcore.testing import CheckPlan, ContractFixture, tiny_bn_model, tiny_data
    from fedcore_treelearning.cohort import TreeCohort
    from fedcore_treelearning.evaluate import TreeEval
    from fedcore_treelearning.share import TreeShare

    companions = [c() for c in (TreeShare, TreeCohort, TreeEval) if c is not cls]
    return CheckPlan(fixture=ContractFixture(model_factory=tiny_bn_model, companions=companions,
                                             data_factory=lambda: tiny_data(n=48, n_test=24)))
