"""The heterogeneous-device runtime: device profiles, the FLOP/byte cost model, the simulated clock, faults, and
where client training computes (``Placement``; ``active_placement()`` inside a client's training, e.g. a cohort
that must know the precision).

    from fedcore.runtime import SimClock, ProfileAssignment, Faults
    clock = SimClock()                                     # presets: phone, watch, laptop, jetson-*
    profiles = ProfileAssignment(weights={"watch": 4, "phone": 2, "laptop": 2})
    pipe.run(..., clock=clock, profiles=profiles, faults=Faults(dropout_during=0.1))

See docs/runtime.md.
"""
from fedcore.runtime.clock import Clock, ClockBase, SimClock, clock_of
from fedcore.runtime.cost_model import CostModel, ResourceError, ShareCost, measure
from fedcore.runtime.faults import FaultPlan, Faults
from fedcore.runtime.meter import book_samples, count_samples, uncounted
from fedcore.runtime.placement import Placement, active_placement
from fedcore.runtime.profiles import (
    DeviceProfile,
    ProfileAssignment,
    edge_presets,
    jetson_presets,
    load_profiles,
    presets,
)

__all__ = [
    "Clock", "ClockBase", "CostModel", "DeviceProfile", "FaultPlan", "Faults", "Placement", "ProfileAssignment",
    "ResourceError", "ShareCost", "SimClock",
    "active_placement", "book_samples", "clock_of", "count_samples", "edge_presets", "jetson_presets", "load_profiles",
    "measure", "presets", "uncounted",
]
