"""The fedcore contract checks, in the three lines every plugin should have (plus the new rules' non-default
settings; fedcore's own suite checks every registered component at its defaults)."""
from fedcore.testing import parametrize_with_checks
from fedcore_robust import CentredClipping, CoordinateMedian, MultiKrum, TrimmedMean


@parametrize_with_checks([TrimmedMean(), TrimmedMean(beta=0.3), TrimmedMean(beta=0.0), CoordinateMedian(),
                          MultiKrum(m=2), CentredClipping(tau=10.0, iterations=3)])
def test_contract(component, check):
    check(component)
