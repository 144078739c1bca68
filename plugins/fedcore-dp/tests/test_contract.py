"""The fedcore contract checks for every component of the plugin."""
from fedcore.testing import parametrize_with_checks, plan_for
from fedcore_dp import DPFedAvg, DPSGDUpdate


@parametrize_with_checks([*plan_for(DPFedAvg).presets, DPSGDUpdate()])
def test_contract(component, check):
    check(component)
