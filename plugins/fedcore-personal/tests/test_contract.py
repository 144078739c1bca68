"""fedcore's contract checks at settings other than the defaults (fedcore's own suite checks every registered
component at its defaults, tests/test_registered_contracts.py)."""
from fedcore.testing import parametrize_with_checks
from fedcore_personal import DittoUpdate, FedPerShare, FedRepUpdate, PersonalEval


@parametrize_with_checks([FedPerShare(personal=r"^4\."), FedRepUpdate(head_epochs=1), DittoUpdate(lam=0.0,
                                                                                                    personal_epochs=2),
                          PersonalEval(server_test=False)])
def test_contract(component, check):
    check(component)
