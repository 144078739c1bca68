"""The fedcore contract checks for the component."""
from fedcore.testing import parametrize_with_checks, plan_for
from fedcore_secagg import SecAggPlus


@parametrize_with_checks(plan_for(SecAggPlus).presets)
def test_contract(component, check):
    check(component)
