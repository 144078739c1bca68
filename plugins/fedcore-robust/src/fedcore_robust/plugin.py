"""Entry point ``robust`` (group ``fedcore``): registers the components. Imports classes only, does no work."""
import fedcore
from fedcore_robust.aggregators import CoordinateMedian, TrimmedMean


@fedcore.hookimpl
def fedcore_register_components(registry):
    registry.add("trimmed-mean", TrimmedMean)
    registry.add("median", CoordinateMedian)
