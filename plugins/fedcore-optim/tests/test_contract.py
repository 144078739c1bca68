"""fedcore's contract checks for settings other than the defaults, and under FedBuff's schedule.

The defaults of every registered component are checked by fedcore's own suite (tests/test_registered_contracts.py).
"""
import attrs

from fedcore.builtin import BufferedSchedule
from fedcore.testing import CHECK_FIXTURE, parametrize_with_checks
from fedcore_optim import FedAdam, FedAvgM


@parametrize_with_checks([FedAvgM(momentum=0.0), FedAdam(bias_correction="adam", weighting="uniform")])
def test_contract(component, check):
    check(component)


# resume under FedBuff: the moments and the in-flight updates both come back from the checkpoint
@parametrize_with_checks([FedAdam()], fixture=attrs.evolve(CHECK_FIXTURE, companions=[BufferedSchedule(buffer_size=2)]))
def test_contract_buffered(component, check):
    check(component)
