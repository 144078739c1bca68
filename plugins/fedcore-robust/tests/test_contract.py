"""The fedcore contract checks, in the three lines every plugin should have."""
from fedcore.testing import parametrize_with_checks
from fedcore_robust import CoordinateMedian, TrimmedMean


@parametrize_with_checks([TrimmedMean(), TrimmedMean(beta=0.3), TrimmedMean(beta=0.0), CoordinateMedian()])
def test_contract(component, check):
    check(component)
