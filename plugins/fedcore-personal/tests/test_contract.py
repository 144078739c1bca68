"""fedcore's contract checks at settings other than the defaults (fedcore's own suite checks every registered
component at its defaults, tests/test_registered_contracts.py)."""
from fedcore.testing import parametrize_with_checks
from fedcore_personal import FedPerShare, FedRepUpdate


@parametrize_with_checks([FedPerShare(personal=r"^4\."), FedRepUpdate(head_epochs=1)])
def test_contract(component, check):
    check(component)
