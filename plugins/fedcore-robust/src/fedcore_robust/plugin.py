"""Entry point ``robust`` (group ``fedcore``): registers the components. Imports classes only, does no work."""
from typing import Any

import fedcore
from fedcore_robust.aggregators import CoordinateMedian, TrimmedMean


@fedcore.hookimpl
def fedcore_register_components(registry: Any) -> None:  # fedcore's registry type is not public API
    registry.add("trimmed-mean", TrimmedMean)
    registry.add("median", CoordinateMedian)
